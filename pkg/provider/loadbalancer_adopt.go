package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// findOrAdopt returns the Service's LoadBalancer: its own, or a LoadBalancer of this cluster
// retained after an earlier Service that it takes over with its addresses: the one its
// annotation keys.AnnotationLoadBalancerName names, or the one under its own name retained
// after it (the Service stopped being of type LoadBalancer and is one again). A named
// LoadBalancer it cannot take over is a Problem, and no LoadBalancer is made in its place.
func (l *loadBalancers) findOrAdopt(ctx context.Context, clusterName string, service *corev1.Service, desired *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	owners := l.owners(clusterName)
	lb, err := l.ironcore.ServiceLoadBalancer(ctx, owners, service, false)
	var conflict *ironcore.OwnershipConflict
	switch {
	case errors.As(err, &conflict) && owners.Retains(conflict.LoadBalancer) &&
		conflict.LoadBalancer.Annotations[keys.AnnotationRetainedFrom] == service.Namespace+"/"+service.Name:
		return l.adopt(ctx, service, desired, conflict.LoadBalancer)
	case err != nil:
		return nil, l.conflict(err, service)
	case lb != nil:
		return lb, nil
	}
	name, named := service.Annotations[keys.AnnotationLoadBalancerName]
	if !named {
		return nil, nil
	}
	// Read live: the cache may not show yet that this Service took it over a moment ago.
	lb, err = l.ironcore.LiveLoadBalancer(ctx, name)
	switch {
	case errors.Is(err, ironcore.ErrNotFound):
		return nil, notAdopted(name, "does not exist")
	case err != nil:
		return nil, err
	case owners.Owns(lb, service):
		return lb, nil
	case !owners.Retains(lb):
		owner := ironcore.OwnerOf(lb)
		return nil, notAdopted(name, fmt.Sprintf("is not retained by this cluster: it records Service %s/%s of cluster %q", owner.Namespace, owner.Name, owner.Cluster))
	}
	return l.adopt(ctx, service, desired, lb)
}

// adopt takes over lb, retained by this cluster, for the Service, if it is of the type the
// Service asks for.
func (l *loadBalancers) adopt(ctx context.Context, service *corev1.Service, desired, lb *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	if lb.DeletionTimestamp != nil {
		return nil, notAdopted(lb.Name, "is being deleted")
	}
	if lb.Spec.Type != desired.Spec.Type {
		return nil, notAdopted(lb.Name, fmt.Sprintf("is %s and the Service asks for %s: change the Service's %s annotation, or name another",
			lb.Spec.Type, desired.Spec.Type, keys.AnnotationInternalLoadBalancer))
	}
	adopted, err := l.ironcore.AdoptRetainedLoadBalancer(ctx, lb, desired.Labels, desired.Annotations)
	if apierrors.IsConflict(err) {
		// Changed since read: another Service may have taken it; the retry reads it again.
		return nil, fmt.Errorf("IronCore LoadBalancer %s changed while this Service took it over; trying again: %w", lb.Name, err)
	}
	if err != nil {
		return nil, err
	}
	addresses := strings.Join(ipStrings(adopted), ",")
	klog.InfoS("Took over a retained IronCore LoadBalancer", "service", klog.KObj(service), "loadBalancer", klog.KObj(adopted), "addresses", addresses)
	l.recorder.Eventf(service, corev1.EventTypeNormal, ReasonLoadBalancerAdopted,
		"Took over IronCore LoadBalancer %s, retained after Service %s, with its addresses %s", adopted.Name, lb.Annotations[keys.AnnotationRetainedFrom], addresses)
	return adopted, nil
}

// notAdopted is the Problem of a LoadBalancer named for a Service that it cannot take over.
func notAdopted(name, why string) *lbspec.Problem {
	return &lbspec.Problem{Reason: ReasonNotAdopted, Message: fmt.Sprintf(
		"IronCore LoadBalancer %s, named by annotation %s, %s; nothing was changed and no other LoadBalancer is made until the annotation names a LoadBalancer this cluster retained, or is removed",
		name, keys.AnnotationLoadBalancerName, why)}
}
