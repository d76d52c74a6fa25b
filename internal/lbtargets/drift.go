package lbtargets

import (
	"context"
	"errors"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// Drift: whether a routing is the desired one as this process knows it newest, and the repair
// of one changed behind the CCM's back.

// routingInPlace reports whether lb's routing already is the desired one, comparing it with
// the routing as this process knows it newest: the one it last wrote while the cache does not
// show that write yet (a sync that wants the routing as it was before would otherwise find it
// unchanged and write nothing), else the one IronCore has (the cache, or a live read in
// selector mode). A routing that differs from this process's last write although IronCore's is
// newer was changed behind its back: that drift is counted and reported, and written back.
func (t *Controller) routingInPlace(ctx context.Context, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer, routing *networkingv1alpha1.LoadBalancerRouting) (bool, error) {
	// Read only: existing is compared, never changed.
	existing, err := t.ironcore.ReadOnlyLoadBalancerRouting(ctx, lb.Name)
	if err != nil && !errors.Is(err, ironcore.ErrNotFound) {
		return false, err
	}
	t.routing.mu.Lock()
	last, recorded := t.routing.written[lb.UID]
	t.routing.mu.Unlock()
	if recorded {
		if existing == nil && !t.ironcore.RoutingsLive() {
			// Not in the cache: deleted since this process wrote it, or written too recently
			// for the cache to show it. Only the API server tells.
			existing, err = t.ironcore.LiveLoadBalancerRouting(ctx, lb.Name)
			if err != nil && !errors.Is(err, ironcore.ErrNotFound) {
				return false, err
			}
		}
		if existing != nil && ironcore.NewerVersion(last.resourceVersion, existing.ResourceVersion) {
			return last.digest == ironcore.RoutingDigest(routing), nil
		}
		if existing == nil || !ironcore.OwnedBy(existing, lb) || ironcore.RoutingDigest(existing) != last.digest {
			t.forgetRouting(lb.UID)
			t.driftRepaired(service, lb)
		}
	}
	if existing == nil {
		return false, nil
	}
	if t.selecting && existing.Labels[keys.LabelRoutingCluster] != t.cluster {
		// Unlabelled, it is not watched (a routing IronCore wrote while the LoadBalancer
		// selected, or one written before the label existed).
		return false, nil
	}
	return ironcore.OwnedBy(existing, lb) && ironcore.RoutingDigest(existing) == ironcore.RoutingDigest(routing), nil
}

// routingLiveInPlace reports whether lb's routing on the API server already is the desired one.
func (t *Controller) routingLiveInPlace(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, routing *networkingv1alpha1.LoadBalancerRouting) (bool, error) {
	existing, err := t.ironcore.LiveLoadBalancerRouting(ctx, lb.Name)
	switch {
	case errors.Is(err, ironcore.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return ironcore.OwnedBy(existing, lb) && existing.Labels[keys.LabelRoutingCluster] == t.cluster &&
		ironcore.RoutingDigest(existing) == ironcore.RoutingDigest(routing), nil
}

// driftRepaired counts and reports a routing found changed behind this process's back; the
// caller writes it back.
func (t *Controller) driftRepaired(service *corev1.Service, lb *networkingv1alpha1.LoadBalancer) {
	metrics.LoadBalancerTargetDriftRepaired.WithLabelValues("routing").Inc()
	if service == nil {
		klog.InfoS("The LoadBalancerRouting of a retained LoadBalancer was changed outside the CCM; emptying it again", "loadBalancer", klog.KObj(lb))
		return
	}
	klog.InfoS("A LoadBalancerRouting was changed outside the CCM; writing it back", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb))
	if t.recorder != nil {
		t.recorder.Eventf(service, corev1.EventTypeNormal, ReasonDriftRepaired,
			"The LoadBalancerRouting of IronCore LoadBalancer %s was changed outside the CCM; its targets were written back", lb.Name)
	}
}

// queueOwnerOf queues the routing key of the Service that the LoadBalancer was made for, or of
// the LoadBalancer itself if it was retained after its Service.
func (t *Controller) queueOwnerOf(lb *networkingv1alpha1.LoadBalancer) {
	if ironcore.Retained(lb) {
		t.queue.Add(key{kind: retainedKind, name: lb.Name})
		return
	}
	if owner := ironcore.OwnerOf(lb); owner.Namespace != "" && owner.Name != "" {
		t.QueueRouting(owner.Namespace, owner.Name)
	}
}

// queueRoutingOwner queues the routing key of the Service whose LoadBalancer owns the routing,
// or whose LoadBalancer has its name (a routing stripped of its owner by hand is repaired too).
func (t *Controller) queueRoutingOwner(routing *networkingv1alpha1.LoadBalancerRouting) {
	owned := false
	for _, ref := range routing.OwnerReferences {
		if ref.Kind != "LoadBalancer" {
			continue
		}
		owned = true
		if lb, err := t.ironcore.LoadBalancer(context.Background(), ref.Name); err == nil && lb.UID == ref.UID {
			t.queueOwnerOf(lb)
		}
	}
	if !owned {
		if lb, err := t.ironcore.LoadBalancer(context.Background(), routing.Name); err == nil {
			t.queueOwnerOf(lb)
		}
	}
}
