package lbtargets

import (
	"context"
	"errors"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// What the controller records of Services and LoadBalancers, and when it drops it: as they
// go, whoever deletes them, and after a sync under way recorded them again.

// forgetLoadBalancer drops what this process recorded for the LoadBalancer: the routing it
// last wrote (someone else, IronCore while the LoadBalancer still selected, may have written
// it since, and the next sync compares with IronCore's) and whether its selector may move.
func (t *Controller) forgetLoadBalancer(uid types.UID) {
	t.moves.forget(uid)
	t.forgetRouting(uid)
}

func (t *Controller) forgetRouting(uid types.UID) {
	t.routing.mu.Lock()
	defer t.routing.mu.Unlock()
	delete(t.routing.written, uid)
}

// loadBalancerDeleted forgets what was recorded for a deleted LoadBalancer, whoever deleted it:
// the provider, the orphan collector or a hand.
func (t *Controller) loadBalancerDeleted(lb *networkingv1alpha1.LoadBalancer) {
	t.forgetLoadBalancer(lb.UID)
	t.forgetNudged(lb.UID)
}

// loadBalancerChanged queues the routing the LoadBalancer's change concerns (queueOwnerOf).
// One that stopped selecting had its routing written by IronCore until then, and a rewrite
// IronCore began before may still land: what was recorded of it is dropped, and its routing
// compared with IronCore's a few times soon.
func (t *Controller) loadBalancerChanged(old, lb *networkingv1alpha1.LoadBalancer) {
	if old != nil && old.Spec.NetworkInterfaceSelector != nil && lb.Spec.NetworkInterfaceSelector == nil {
		t.forgetLoadBalancer(lb.UID)
		if owner := ironcore.OwnerOf(lb); owner.Name != "" && !ironcore.Retained(lb) {
			t.recheckSoon(owner.Namespace, owner.Name)
		}
	}
	t.queueOwnerOf(lb)
}

// serviceChanged follows a Service's changes: whether it shows an address (for the queue's
// order); turning Local or back changes who routes it, and its targets, and so does its
// wanting a load balancer or no more, which drops the events recorded on it. The service
// controller's call may come with a Service newer than this cache, so the routing is synced
// again when the cache shows the change.
func (t *Controller) serviceChanged(old, service *corev1.Service) {
	t.recordAddress(service)
	wanted := t.class.Wants(service)
	if t.class.Wants(old) && !wanted {
		t.notices.Forget(service.UID)
	}
	if targetrules.Local(old) != targetrules.Local(service) || t.class.Wants(old) != wanted {
		t.QueueRouting(service.Namespace, service.Name)
	}
}

// deletedMeanwhile tells whether the cache no longer holds lb: a record of a write to it made
// now may have come after its delete event, and is dropped by the caller.
func (t *Controller) deletedMeanwhile(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) bool {
	cached, err := t.ironcore.LoadBalancer(ctx, lb.Name)
	return errors.Is(err, ironcore.ErrNotFound) || (err == nil && cached.UID != lb.UID)
}

// serviceDeleted drops the records of a deleted Service, and queues its routing key: a sync
// under way may record it again, and the next one, finding the Service gone, forgets it.
func (t *Controller) serviceDeleted(service *corev1.Service) {
	key := serviceName(service.Namespace, service.Name)
	t.routing.unaddressed.Delete(key)
	t.routing.mu.Lock()
	request, requested := t.routing.requests[key]
	t.routing.mu.Unlock()
	if !requested || request.UID == service.UID {
		t.forgetRoutingKey(key)
	}
	t.notices.Forget(service.UID)
	t.queue.Add(routingKey(key))
}

// forgetRoutingKey drops what was recorded for the routing key of a Service that is gone or
// wants no load balancer, its target count included.
func (t *Controller) forgetRoutingKey(key string) {
	t.routing.reaching.Delete(key)
	t.routing.unaddressed.Delete(key)
	t.routing.mu.Lock()
	delete(t.routing.requests, key)
	delete(t.routing.reports, key)
	delete(t.routing.verify, key)
	t.routing.mu.Unlock()
	if namespace, name, err := toolscache.SplitMetaNamespaceKey(key); err == nil {
		metrics.LoadBalancerTargets.DeleteLabelValues(namespace, name)
	}
}
