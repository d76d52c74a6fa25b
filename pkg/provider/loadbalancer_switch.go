package provider

import (
	"context"
	"errors"
	"slices"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/grants"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbswitch"
)

// A Service's type switch (package lbswitch): a successor of the new type is made beside the
// LoadBalancer it replaces, which keeps serving until the Service shows the successor's
// addresses.

// successor begins a type switch: desired gets the successor's name, and successor returns that
// LoadBalancer if it exists, or nil for it to be created. existing keeps serving until
// completeSwitch hands over.
func (l *loadBalancers) successor(ctx context.Context, clusterName string, service *corev1.Service, existing, desired *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	desired.Name = lbswitch.SuccessorName(service, existing, desired.Spec.Type)
	lb, err := l.ironcore.LoadBalancer(ctx, desired.Name)
	switch {
	case errors.Is(err, ironcore.ErrNotFound):
		l.recorder.Eventf(service, corev1.EventTypeNormal, ReasonTypeChanged,
			"Replacing %s IronCore LoadBalancer %s with an %s one, %s; the Service keeps its addresses until the new one has its own and a target",
			existing.Spec.Type, existing.Name, desired.Spec.Type, desired.Name)
		return nil, nil
	case err != nil:
		return nil, err
	}
	owners := l.owners(clusterName)
	if owned, err := owners.Check(lb, service); err == nil {
		return owned, nil
	} else if !grants.RetainedAfter(lb, service.Namespace, service.Name) || owners.Adoptable(lb, desired, service.Namespace) != nil {
		return nil, l.report(service, l.conflict(err, service))
	}
	// The Service switches back to the type of a LoadBalancer it retained when it switched
	// away: it takes it, and its addresses, back.
	return l.adopt(ctx, service, desired, lb)
}

// completeSwitch returns the Service's current addresses until lb has addresses that lead
// somewhere, then lb's in one status update. The replaced LoadBalancers are deleted once the
// Service shows lb's addresses, by this sync or by the repair controller (ReleaseReplaced).
func (l *loadBalancers) completeSwitch(ctx context.Context, service *corev1.Service, lb, desired *networkingv1alpha1.LoadBalancer, replaced []*networkingv1alpha1.LoadBalancer) (*corev1.LoadBalancerStatus, error) {
	ready := lbspec.Allocated(lb, desired)
	if ready {
		routes, err := l.routesSomewhere(ctx, service, lb)
		if err != nil {
			return nil, err
		}
		ready = routes
	}
	status := lbspec.Status(lb)
	switch lbswitch.Next(lbswitch.State{Replaced: len(replaced), SuccessorReady: ready, ShowsSuccessor: lbswitch.Shows(service, status)}) {
	case lbswitch.Prepare:
		if l.addressesReported.Load() {
			// The repair controller hands over when lb's addresses or routing arrive.
			return service.Status.LoadBalancer.DeepCopy(), nil
		}
		return nil, l.retry(service, "replacing IronCore LoadBalancer %s with %s of type %s, which has no addresses or no target yet", replaced[0].Name, lb.Name, lb.Spec.Type)
	case lbswitch.Release:
		return status, l.deleteReplaced(ctx, service, replaced)
	default:
		// HandOver: the replaced LoadBalancers go once the status shows lb's addresses.
		return status, nil
	}
}

// ReleaseReplaced deletes the LoadBalancers a type switch replaced, once the Service shows its
// successor's addresses (see completeSwitch).
func (l *loadBalancers) ReleaseReplaced(ctx context.Context, clusterName string, service *corev1.Service) error {
	desired, err := lbspec.Desired(service, l.settings)
	if err != nil {
		return nil //nolint:nilerr // the Service's syncs report its errors
	}
	lb, err := l.find(ctx, clusterName, service, false)
	var conflict *lbspec.Problem
	switch {
	case errors.As(err, &conflict):
		return nil
	case err != nil:
		return err
	case lb == nil || lb.DeletionTimestamp != nil || lb.Spec.Type != desired.Spec.Type:
		return nil
	}
	replaced, err := l.replacedBy(ctx, clusterName, service, lb, desired.Spec.Type)
	if err != nil {
		return err
	}
	// Ready as far as the Service's status goes: it shows lb's addresses only once they lead
	// somewhere.
	state := lbswitch.State{Replaced: len(replaced), SuccessorReady: lbspec.Allocated(lb, desired), ShowsSuccessor: lbswitch.Shows(service, lbspec.Status(lb))}
	if lbswitch.Next(state) != lbswitch.Release {
		return nil
	}
	return l.deleteReplaced(ctx, service, replaced)
}

// Replacing tells, from the IronCore cache, whether the Service has LoadBalancers of more than
// one type, as it has during a type switch, whichever way the Service's own copy points: only
// then can ReleaseReplaced have something to delete, and the Service is worth reading live.
func (l *loadBalancers) Replacing(ctx context.Context, clusterName string, service *corev1.Service) (bool, error) {
	owned, err := l.ironcore.OwnedLoadBalancers(ctx, l.owners(clusterName), service)
	if err != nil {
		return false, err
	}
	var first networkingv1alpha1.LoadBalancerType
	for _, lb := range owned {
		switch {
		case lb.DeletionTimestamp != nil:
		case first == "":
			first = lb.Spec.Type
		case lb.Spec.Type != first:
			return true, nil
		}
	}
	return false, nil
}

// deleteReplaced deletes the LoadBalancers a type switch replaced or, if the Service asks to
// retain its LoadBalancer, retains them: their addresses are what it asked to keep.
func (l *loadBalancers) deleteReplaced(ctx context.Context, service *corev1.Service, replaced []*networkingv1alpha1.LoadBalancer) error {
	retain, err := lbspec.Retain(service)
	_ = l.report(service, err) // a misspelt value is a Warning, and the LoadBalancer is kept
	var errs []error
	for _, lb := range replaced {
		if retain {
			errs = append(errs, l.retain(ctx, service, lb))
			continue
		}
		if err := l.delete(ctx, lb); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.InfoS("Deleted the IronCore LoadBalancer a type switch replaced", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb), "type", lb.Spec.Type)
	}
	return errors.Join(errs...)
}

// liveSuccessor returns, from the API server, the LoadBalancer a type switch may have just
// created beside lb and the cache may not show yet.
func (l *loadBalancers) liveSuccessor(ctx context.Context, clusterName string, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer, found []*networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	other := networkingv1alpha1.LoadBalancerTypeInternal
	if lb.Spec.Type == networkingv1alpha1.LoadBalancerTypeInternal {
		other = networkingv1alpha1.LoadBalancerTypePublic
	}
	name := lbswitch.SuccessorName(service, lb, other)
	if slices.ContainsFunc(found, func(known *networkingv1alpha1.LoadBalancer) bool { return known.Name == name }) {
		return nil, nil
	}
	successor, err := l.ironcore.LiveLoadBalancer(ctx, name)
	switch {
	case errors.Is(err, ironcore.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case successor.DeletionTimestamp != nil || !l.owners(clusterName).Owns(successor, service):
		return nil, nil
	}
	return successor, nil
}
