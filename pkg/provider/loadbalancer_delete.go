package provider

import (
	"context"
	"errors"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// EnsureLoadBalancerDeleted deletes the Service's LoadBalancer if this cluster owns one, and
// returns without waiting for IronCore to finish. Deleting what is gone is not an error.
func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	_, _ = l.retries.forget(service.UID)
	l.notices.Forget(service.UID)
	if l.targets != nil {
		l.targets.ForgetService(service)
	}
	metrics.LoadBalancerTargets.DeleteLabelValues(service.Namespace, service.Name)
	lb, err := l.find(ctx, clusterName, service, true)
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
	if lb.DeletionTimestamp == nil {
		replaced = append(replaced, lb)
	}
	successor, err := l.liveSuccessor(ctx, clusterName, service, lb, replaced)
	if err != nil {
		return err
	}
	if successor != nil {
		replaced = append(replaced, successor)
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
	if l.targets != nil {
		l.targets.ForgetLoadBalancer(lb.UID)
	}
	routing, err := l.ironcore.LoadBalancerRouting(ctx, lb.Name)
	switch {
	case err == nil && ownedBy(routing, lb):
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
