package provider

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbswitch"
)

// EnsureLoadBalancerDeleted deletes the Service's LoadBalancer if this cluster owns one, without
// waiting, unless the Service asks to retain it (see retain).
func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	_, _ = l.retries.forget(service.UID)
	l.notices.Forget(service.UID)
	lb, err := l.ironcore.ServiceLoadBalancer(ctx, l.owners(clusterName), service, true)
	var retained *ironcore.OwnershipConflict
	if errors.As(err, &retained) && l.owners(clusterName).Retains(retained.LoadBalancer) {
		// Under the Service's name: retained by an earlier call for it, or for its namesake.
		return nil
	}
	err = l.conflict(err, service)
	var conflict *lbspec.Problem
	switch {
	case errors.As(err, &conflict):
		l.warn(service, conflict)
		return nil
	case err != nil:
		return err
	case lb == nil:
		return nil
	}
	// During a type switch the Service has two.
	replaced, err := l.replacedBy(ctx, clusterName, service, lb, lb.Spec.Type)
	if err != nil {
		return err
	}
	successor, err := l.liveSuccessor(ctx, clusterName, service, lb, replaced)
	if err != nil {
		return err
	}
	if successor != nil {
		replaced = append(replaced, successor)
	}
	if lb.DeletionTimestamp == nil {
		replaced = append(replaced, lb)
	}
	retain, err := lbspec.Retain(service)
	_ = l.report(service, err) // a misspelt value is a Warning, and the LoadBalancer is kept
	if kept := lbswitch.ToRetain(service, replaced); retain && kept >= 0 {
		if err := l.retain(ctx, service, replaced[kept]); err != nil {
			return err
		}
		replaced = slices.Delete(replaced, kept, kept+1)
	}
	var errs []error
	for _, lb := range replaced {
		errs = append(errs, l.delete(ctx, lb))
	}
	return errors.Join(errs...)
}

// delete deletes a LoadBalancer of ours and the LoadBalancerRouting this CCM wrote for it.
// IronCore's garbage collector would remove the routing too, but not if it is not running.
func (l *loadBalancers) delete(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	routing, err := l.ironcore.LoadBalancerRouting(ctx, lb.Name)
	switch {
	case err == nil && ironcore.OwnedBy(routing, lb):
		if err := l.ironcore.DeleteLoadBalancerRouting(ctx, routing); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, ironcore.ErrNotFound):
		return err
	}
	if err := l.ironcore.DeleteLoadBalancer(ctx, lb); err != nil {
		return err
	}
	klog.V(2).InfoS("Deleted IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "service", klog.KRef(ironcore.OwnerOf(lb).Namespace, ironcore.OwnerOf(lb).Name))
	return nil
}

// retain keeps lb after its Service: it records the Service no more, so nothing of the Service
// finds it again, and is marked retained by this cluster with where it came from; it stops
// selecting targets, and the targets controller empties its routing. Its addresses stay.
func (l *loadBalancers) retain(ctx context.Context, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer) error {
	id, _ := l.settings.ClusterID.Known()
	retained, err := l.ironcore.RetainLoadBalancer(ctx, lb, service.Namespace+"/"+service.Name, time.Now(), id)
	if err != nil {
		return err
	}
	addresses := ironcore.Addresses(retained)
	klog.InfoS("Retained IronCore LoadBalancer after its Service", "loadBalancer", klog.KObj(retained), "service", klog.KObj(service), "addresses", addresses)
	l.recorder.Eventf(service, corev1.EventTypeNormal, ReasonLoadBalancerRetained,
		"IronCore LoadBalancer %s is kept with its addresses %s, routing to no Node; delete it on IronCore to release them",
		retained.Name, strings.Join(addresses, ","))
	return nil
}
