package lbtargets

import (
	"context"
	"sync"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// NudgeSelecting runs the nudge alone, without the label sync that calls it, so that a test
// can see what it decides on a cache held behind.
func (t *Controller) NudgeSelecting(ctx context.Context, targets map[string]bool) error {
	return t.nudgeSelecting(ctx, targets)
}

// ErrCacheBehind is errCacheBehind, for the tests.
var ErrCacheBehind = errCacheBehind

// WaitsForFirstTraffic tells whether the Service's routing goes first in the queue.
func (t *Controller) WaitsForFirstTraffic(namespace, name string) bool {
	return t.waitsForFirstTraffic(routingKey(serviceName(namespace, name)))
}

// RoutingsRemembered counts the LoadBalancers whose routing this process remembers writing.
func (t *Controller) RoutingsRemembered() int {
	t.routing.mu.Lock()
	defer t.routing.mu.Unlock()
	return len(t.routing.written)
}

// RoutingKeysRemembered counts what is recorded of the Service's routing key: a request, a
// report, a verify mark, a destination, the lack of an address.
func (t *Controller) RoutingKeysRemembered(namespace, name string) int {
	key := serviceName(namespace, name)
	t.routing.mu.Lock()
	_, requested := t.routing.requests[key]
	_, reported := t.routing.reports[key]
	marked := []bool{requested, reported, t.routing.verify[key]}
	t.routing.mu.Unlock()
	for _, m := range []*sync.Map{&t.routing.reaching, &t.routing.unaddressed} {
		_, ok := m.Load(key)
		marked = append(marked, ok)
	}
	n := 0
	for _, ok := range marked {
		if ok {
			n++
		}
	}
	return n
}

// IronCoreCache is the controller's IronCore client, whose cache a test waits for.
func (t *Controller) IronCoreCache() *ironcore.Client { return t.ironcore }

// Serves tells whether the controller's last verdict on the Node lets it serve.
func (t *Controller) Serves(node string) bool {
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	state, known := t.known[node]
	return known && state.unhealthy == "" && state.eligible
}

// LabelWaitsForRoute tells whether the NetworkInterface's target label waits for the write of
// its Node's route.
func (t *Controller) LabelWaitsForRoute(nic string) bool {
	t.labels.mu.Lock()
	defer t.labels.mu.Unlock()
	return t.labels.deferred[nic]
}

// LabelIfServing is the target label's rider on NetworkInterface writes.
func (t *Controller) LabelIfServing(base, nic *networkingv1alpha1.NetworkInterface) bool {
	return t.labelIfServing(base, nic)
}
