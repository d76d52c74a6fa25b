package lbtargets

import "context"

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
