package lbtargets

import (
	"context"

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
	return t.waitsForFirstTraffic(routingPrefix + namespace + "/" + name)
}

// RoutingsRemembered counts the LoadBalancers whose routing this process remembers writing.
func (t *Controller) RoutingsRemembered() int {
	t.routing.mu.Lock()
	defer t.routing.mu.Unlock()
	return len(t.routing.written)
}

// RoutingKeysRemembered counts the Services' routing keys with a request, a report, a verify
// mark or a destination recorded.
func (t *Controller) RoutingKeysRemembered() int {
	keys := map[any]bool{}
	t.routing.mu.Lock()
	for key := range t.routing.requests {
		keys[key] = true
	}
	for key := range t.routing.reports {
		keys[key] = true
	}
	for key := range t.routing.verify {
		keys[key] = true
	}
	t.routing.mu.Unlock()
	t.routing.reaching.Range(func(key, _ any) bool {
		keys[key] = true
		return true
	})
	return len(keys)
}

// IronCoreCache is the controller's IronCore client, whose cache a test waits for.
func (t *Controller) IronCoreCache() *ironcore.Client { return t.ironcore }
