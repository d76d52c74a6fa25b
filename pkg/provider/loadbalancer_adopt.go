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

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/grants"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// findOrAdopt returns the Service's LoadBalancer: its own, or one this cluster retained that
// it takes over with its addresses: the one under its own name retained after it, or the one
// it asks for (lbspec.WantedAdoption). One it must but cannot take over is a Problem, and no
// LoadBalancer is made in its place.
func (l *loadBalancers) findOrAdopt(ctx context.Context, clusterName string, service *corev1.Service, desired *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	owners := l.owners(clusterName)
	lb, err := l.ironcore.ServiceLoadBalancer(ctx, owners, service, false)
	var conflict *ironcore.OwnershipConflict
	switch {
	case errors.As(err, &conflict) && owners.Retains(conflict.LoadBalancer) && grants.RetainedAfter(conflict.LoadBalancer, service.Namespace, service.Name):
		lb = conflict.LoadBalancer
		err = owners.Adoptable(lb, desired, service.Namespace)
	case err != nil:
		return nil, l.conflict(err, service)
	case lb != nil:
		return lb, nil
	default:
		want, wanted := lbspec.WantedAdoption(service, desired)
		if !wanted {
			return nil, nil
		}
		var owned bool
		if lb, owned, err = l.ironcore.WantedLoadBalancer(ctx, owners, service, want, desired); owned || (lb == nil && err == nil) {
			return lb, nil
		}
	}
	var refused *ironcore.NotAdoptable
	if errors.As(err, &refused) {
		if problem := refused.Problem(); !refused.Fallback {
			return nil, problem
		} else if l.notices.Changed(service.UID, "adoption", problem.Message) {
			l.warn(service, problem)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return l.adopt(ctx, service, desired, lb)
}

// adopt takes over lb, retained by this cluster, for the Service.
func (l *loadBalancers) adopt(ctx context.Context, service *corev1.Service, desired, lb *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	adopted, err := l.ironcore.AdoptRetainedLoadBalancer(ctx, lb, desired.Labels, desired.Annotations)
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("IronCore LoadBalancer %s changed while this Service took it over (another may have taken it); reading it again: %w", lb.Name, err)
	}
	if err != nil {
		return nil, err
	}
	addresses := strings.Join(ironcore.Addresses(adopted), ",")
	klog.InfoS("Took over a retained IronCore LoadBalancer", "service", klog.KObj(service), "loadBalancer", klog.KObj(adopted), "addresses", addresses)
	l.recorder.Eventf(service, corev1.EventTypeNormal, ReasonLoadBalancerAdopted,
		"Took over IronCore LoadBalancer %s, retained after Service %s, with its addresses %s", adopted.Name, lb.Annotations[keys.AnnotationRetainedFrom], addresses)
	return adopted, nil
}
