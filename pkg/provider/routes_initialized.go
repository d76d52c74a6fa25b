package provider

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
)

// nodeInitializedWait bounds how long a created route waits for its Node's initialization: a
// Node the cloud node controller cannot initialize holds the route controller's pass no
// longer than this, once (the next pass finds the route in place).
const nodeInitializedWait = 10 * time.Second

// awaitInitialized waits until the Node cache shows the Node initialized, gone, or
// nodeInitializedWait has passed. When CreateRoute returns, the route controller patches the
// Node's NetworkUnavailable condition; the cloud node controller initializes a Node with an
// update of its cached copy, which that patch makes stale, and retries until the cache catches
// up, its workers held from the Nodes queued behind. The route is in place already; only the
// route controller's patch waits, so it comes after the initialization. (On the test stack,
// 1,000 Nodes joining at once: routes came before 678 to 911 of the initializations, whose
// updates met 554 to 965 conflicts, and Nodes took up to 17 s to initialize.)
func (r *routes) awaitInitialized(ctx context.Context, name types.NodeName) {
	if r.nodes == nil {
		return
	}
	initialized := func(context.Context) (bool, error) {
		node, err := r.nodes.Get(string(name))
		if err != nil {
			return true, nil //nolint:nilerr // a Node gone waits for nothing
		}
		return !slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool {
			return taint.Key == cloudproviderapi.TaintExternalCloudProvider
		}), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodeInitializedWait, true, initialized); err != nil {
		klog.V(2).InfoS("Routed a Node that is not initialized yet", "node", klog.KRef("", string(name)), "waited", nodeInitializedWait)
	}
}
