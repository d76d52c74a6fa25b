package lbtargets

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// syncNode applies the target rules to a Node and, when its verdict changes, records that and
// queues every target: at once when the Node may leave them, after the coalescing delay when
// it joins, so that a wave of joining Nodes is written once and no removal waits for it. Within
// the Ready grace period, it comes back when the period ends.
func (t *Controller) syncNode(ctx context.Context, name string) error {
	node, err := t.listers.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		t.leftOut.Delete(name)
		if t.forgetNode(name) {
			t.queueAllTargets(0)
		}
		return nil
	}
	if err != nil {
		return err
	}
	t.nodesMu.Lock()
	previous, seen := t.known[name]
	// Known before the verdict reads the Machine: a change of the Machine that comes while it
	// does queues this Node again.
	if machine, _ := t.ironcore.MachineNamedBy(node); machine != "" {
		t.machineNodes[machine] = name
	}
	t.nodesMu.Unlock()
	// Whether the Node is a target now, for the grace period: as this controller last found
	// it; after a restart, the targets' own syncs judge from IronCore.
	verdict, graceLeft, ok, err := t.NodeVerdict(ctx, node, seen && previous.unhealthy == "")
	if err != nil {
		return err
	}
	if !ok {
		// Not an IronCore Machine of this namespace: never a target.
		t.forgetNode(name)
		return nil
	}
	state := nodeState{unhealthy: verdict.Kind, eligible: targetrules.Eligible(node)}
	t.nodesMu.Lock()
	t.known[name] = state
	t.countUnhealthy()
	t.nodesMu.Unlock()

	if graceLeft > 0 {
		// A moment past the end, so that the verdict has turned.
		t.queue.AddAfter(key{kind: graceEndKind, name: name}, graceLeft+100*time.Millisecond)
	}
	if seen && previous == state {
		return nil
	}
	t.recordVerdict(node, verdict, previous, seen)
	if !seen && !verdict.Healthy() && !verdict.FailsOpen() {
		// A new Node that no Service can have as a target, not even failing open (not
		// initialized yet, say, as every Node registers): no target changes. The change
		// that lets it serve queues them.
		return nil
	}
	// A Node seen for the first time joins too, whether or not the service controller syncs
	// the load balancers for it (it does not for a Node that was never Ready).
	delay := time.Duration(0)
	if joins(previous, state, seen) {
		delay = t.coalesce
	}
	t.queueAllTargets(delay)
	return nil
}

// joins tells whether a Node's change from previous (if seen) to state can only add it to
// targets: it can serve now and could not before, or is new. Any other change may take it out
// of some, and is not delayed.
func joins(previous, state nodeState, seen bool) bool {
	serves := func(s nodeState) bool { return s.unhealthy == "" && s.eligible }
	return serves(state) && (!seen || !serves(previous))
}

// recordVerdict records on the Node that its traffic changes. A Node that has not served yet
// (not initialized, never Ready) is not told it stops: it joins quietly once it can serve.
func (t *Controller) recordVerdict(node *corev1.Node, verdict targetrules.Verdict, previous nodeState, seen bool) {
	joining := func(kind string) bool {
		return kind == targetrules.KindNotInitialized || kind == targetrules.KindNeverReady
	}
	switch {
	case verdict.Kind != "" && (!seen || previous.unhealthy != verdict.Kind) && !joining(verdict.Kind):
		metrics.NodeHealthExclusions.WithLabelValues(verdict.Kind).Inc()
		if t.recorder != nil {
			unless := ", unless no Node that could serve a Service is healthy"
			if !verdict.FailsOpen() {
				unless = ""
			}
			t.recorder.Eventf(node, corev1.EventTypeWarning, ReasonTargetExcluded,
				"The Node no longer receives load balancer traffic%s: %s", unless, verdict.Reason)
		}
		klog.InfoS("Node cannot serve; it is no longer a load balancer target", "node", klog.KObj(node), "reason", verdict.Reason)
	case verdict.Kind == "" && seen && joining(previous.unhealthy):
		klog.V(2).InfoS("Node can serve; it becomes a load balancer target", "node", klog.KObj(node))
	case verdict.Kind == "" && seen && previous.unhealthy != "":
		if t.recorder != nil {
			t.recorder.Event(node, corev1.EventTypeNormal, ReasonTargetRestored, "The Node is healthy again and receives load balancer traffic")
		}
		klog.InfoS("Node is healthy again; it is a load balancer target", "node", klog.KObj(node))
	}
}

// forgetNode forgets a Node, and reports whether it was known.
func (t *Controller) forgetNode(name string) bool {
	t.nodesMu.Lock()
	defer t.nodesMu.Unlock()
	_, known := t.known[name]
	delete(t.known, name)
	for machine, node := range t.machineNodes {
		if node == name {
			delete(t.machineNodes, machine)
		}
	}
	t.countUnhealthy()
	return known
}

// countUnhealthy sets the gauge of unhealthy Nodes; t.nodesMu must be held.
func (t *Controller) countUnhealthy() {
	unhealthy := 0
	for _, known := range t.known {
		if known.unhealthy != "" {
			unhealthy++
		}
	}
	metrics.UnhealthyNodes.Set(float64(unhealthy))
}

// nodeState is what a Node's sync found: the verdict's kind and whether the service controller
// passes the Node to load balancers.
type nodeState struct {
	unhealthy string
	eligible  bool
}

// machineChanged queues the Node of the named Machine, whose state, existence and
// NetworkInterfaces the target rules read.
func (t *Controller) machineChanged(machine string) {
	t.nodesMu.Lock()
	node, ok := t.machineNodes[machine]
	t.nodesMu.Unlock()
	if ok {
		t.queue.Add(key{kind: nodeKind, name: node})
	}
}

// nodeVerdicts is the controller's record of each Node's verdict, for the events and metrics
// that tell a Node's traffic changed, and the Machine → Node map for Machine changes.
type nodeVerdicts struct {
	nodesMu      sync.Mutex
	known        map[string]nodeState
	machineNodes map[string]string
}
