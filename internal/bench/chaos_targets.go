package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// targetBound is how long a flapped Node or a hand edit may take to be followed or repaired
// before the run calls it a problem; the measured times are in the result.
const targetBound = 2 * time.Minute

// editBound is how long a hand edit keeps trying to find a routing to edit and to win the race
// with the CCM's own writes to it.
const editBound = 30 * time.Second

// targetChaos disturbs the load balancer targets once each per wave, one after another: a Node
// goes unhealthy and healthy again (NotReady past the grace period, or the cluster
// autoscaler's deletion taint, in turn), a target label is removed by hand (selector mode; in
// the default mode, a destination of a routing the CCM writes for a Service that is not
// Local), and a Local Service's routing loses a destination by hand. While a Node is
// disturbed on purpose, its leaving routings is no drop; every routing must leave it and take
// it back, and every hand edit must be put back, within targetBound.
func (c *chaos) targetChaos(ctx context.Context, wave int) error {
	if err := c.flapNode(ctx, wave%2 == 1); err != nil {
		return err
	}
	if c.opts.Selecting {
		if err := c.removeTargetLabel(ctx); err != nil {
			return err
		}
	} else if err := c.editRouting(ctx, false); err != nil {
		return err
	}
	return c.editRouting(ctx, true)
}

// flapNode makes a Node unhealthy until every routing that held it has left it, then healthy
// until they all hold it again.
func (c *chaos) flapNode(ctx context.Context, taint bool) error {
	return c.disturbNode(ctx, func(node, nic string, held []string) error {
		how := "NotReady past the grace period"
		if taint {
			how = "tainted for deletion by the cluster autoscaler"
		}
		if err := c.setHealthy(ctx, node, taint, false); err != nil {
			return err
		}
		left := c.waitForRoutings(ctx, held, nic, false, fmt.Sprintf("Node %s %s", node, how))
		if err := c.setHealthy(ctx, node, taint, true); err != nil {
			return err
		}
		returned := c.waitForRoutings(ctx, held, nic, true, fmt.Sprintf("Node %s healthy again", node))
		c.mu.Lock()
		defer c.mu.Unlock()
		c.result.HealthFlaps++
		c.result.FlapLeftSeconds = append(c.result.FlapLeftSeconds, newSeconds(left))
		c.result.FlapBackSeconds = append(c.result.FlapBackSeconds, newSeconds(returned))
		c.log("Node %s %s: out of %d routings after %s, back in them %s after it was healthy again", node, how, len(held),
			left.Round(time.Millisecond), returned.Round(time.Millisecond))
		return nil
	})
}

// setHealthy makes the Node healthy or unhealthy: by the cluster autoscaler's deletion taint,
// or by its Ready condition (False since past the grace period).
func (c *chaos) setHealthy(ctx context.Context, node string, taint, healthy bool) error {
	switch {
	case taint:
		return c.setDeletionTaint(ctx, node, !healthy)
	case healthy:
		_, err := c.stack.SetNodeReady(ctx, node, corev1.ConditionTrue)
		return err
	default:
		_, err := c.stack.SetNodeReadySince(ctx, node, corev1.ConditionFalse, time.Now().Add(-2*time.Minute))
		return err
	}
}

// removeTargetLabel removes the target label from a Node's NetworkInterface, as a mistaken
// kubectl would, and waits until the CCM has put it back and every routing that held the Node
// holds it again.
func (c *chaos) removeTargetLabel(ctx context.Context) error {
	return c.disturbNode(ctx, func(_, nic string, held []string) error {
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, keys.LabelLoadBalancerTarget))
		object := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: c.stack.Namespace, Name: nic}}
		started := time.Now()
		if err := c.stack.IronCore.Client.Patch(ctx, object, patch); err != nil {
			return fmt.Errorf("remove the target label of NetworkInterface %s: %w", nic, err)
		}
		err := testenv.WaitFor(ctx, targetBound, "the target label of "+nic+" back", func(ctx context.Context) error {
			current := &networkingv1alpha1.NetworkInterface{}
			if err := c.stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(object), current); err != nil {
				return err
			}
			if _, ok := current.Labels[keys.LabelLoadBalancerTarget]; !ok {
				return errors.New("not yet")
			}
			return nil
		})
		repaired := time.Since(started)
		if err != nil {
			c.problem("the target label removed by hand from %s: %v", nic, err)
		}
		c.waitForRoutings(ctx, held, nic, true, "the target label of "+nic+" back")
		c.mu.Lock()
		c.result.LabelRepairSeconds = append(c.result.LabelRepairSeconds, newSeconds(repaired))
		c.mu.Unlock()
		c.log("the target label removed by hand from %s was back after %s", nic, repaired.Round(time.Millisecond))
		return nil
	})
}

// editRouting removes, by hand, a destination from the routing of a Local Service, or of one
// that is not Local, (a routing the CCM writes) and waits until the CCM has put it back.
func (c *chaos) editRouting(ctx context.Context, local bool) error {
	// The CCM may write the routing between the read and the edit: read again and retry, as a
	// person would, for a while.
	var routing *networkingv1alpha1.LoadBalancerRouting
	var key string
	var started time.Time
	err := testenv.WaitFor(ctx, editBound, "a routing to edit", func(ctx context.Context) error {
		var err error
		if routing, key, started, err = c.removeDestination(ctx, local); err != nil {
			return err
		}
		if routing == nil {
			return errors.New("no routing of such a Service holds a Node that can serve")
		}
		return nil
	})
	if err != nil {
		c.log("no destination removed by hand: %v", err)
		return nil
	}
	defer func() {
		c.mu.Lock()
		delete(c.handEdits, routing.Name+" "+key)
		c.mu.Unlock()
	}()
	// As the drop detector sees it, after the edit, so that the edit is still excused when the
	// detector gets to it.
	edited, _ := strconv.ParseUint(routing.ResourceVersion, 10, 64)
	// The routing was seen by the watch before the edit (removeDestination), so one no longer
	// seen was deleted.
	outcome := "was not back"
	err = testenv.WaitFor(ctx, targetBound, "LoadBalancerRouting "+routing.Name+" to hold "+key+" again", func(context.Context) error {
		c.mu.Lock()
		seen, ok := c.seen[routing.Name]
		c.mu.Unlock()
		switch {
		case !ok:
			outcome = "went with its routing"
		case seen.version >= edited && seen.destinations[key]:
			outcome = "was back"
		case !c.stillWanted(routing.Name, key, local):
			outcome = "was no longer wanted"
		default:
			return errors.New("not yet")
		}
		return nil
	})
	repaired := time.Since(started)
	kind := "Cluster"
	if local {
		kind = "Local"
	}
	if err != nil {
		c.problem("a destination removed by hand from the routing of a %s Service: %v", kind, err)
	}
	c.mu.Lock()
	if local {
		c.result.RoutingRepairSeconds = append(c.result.RoutingRepairSeconds, newSeconds(repaired))
	} else {
		c.result.ClusterRoutingRepairSeconds = append(c.result.ClusterRoutingRepairSeconds, newSeconds(repaired))
	}
	c.mu.Unlock()
	c.log("a destination removed by hand from %s routing %s %s after %s", kind, routing.Name, outcome, repaired.Round(time.Millisecond))
	return nil
}

// removeDestination picks a routing of a Local Service, or of one that is not Local, holding
// a Node that can serve, and removes that Node's destination from it by hand, reporting when
// it sent the edit. No routing if there is none to edit; an error for the caller to retry
// when the edit lost a race.
func (c *chaos) removeDestination(ctx context.Context, local bool) (*networkingv1alpha1.LoadBalancerRouting, string, time.Time, error) {
	routings := &networkingv1alpha1.LoadBalancerRoutingList{}
	if err := c.stack.IronCore.Client.List(ctx, routings, client.InNamespace(c.stack.Namespace)); err != nil {
		return nil, "", time.Time{}, err
	}
	c.mu.Lock()
	var routing *networkingv1alpha1.LoadBalancerRouting
	var key string
	for i := range routings.Items {
		candidate := &routings.Items[i]
		state := c.byLoadBalancer[candidate.Name]
		if state == nil || state.local != local {
			continue
		}
		// Only a routing the watch has caught up with: the edit is judged, and excused, by what
		// the watch sees next.
		listed, _ := strconv.ParseUint(candidate.ResourceVersion, 10, 64)
		if seen, ok := c.seen[candidate.Name]; !ok || seen.version < listed {
			continue
		}
		for destination := range destinations(candidate) {
			if node, ok := c.nodeOf(destination); ok && (!local || slices.Contains(state.endpoints, node)) && c.canServe(node) {
				routing, key = candidate, destination
				break
			}
		}
		if routing != nil {
			break
		}
	}
	if routing != nil {
		c.handEdits[routing.Name+" "+key] = true
	}
	c.mu.Unlock()
	if routing == nil {
		return nil, "", time.Time{}, nil
	}
	routing.Destinations = slices.DeleteFunc(routing.Destinations, func(d networkingv1alpha1.LoadBalancerDestination) bool {
		return destinationKey(d) == key
	})
	sent := time.Now()
	err := c.stack.IronCore.Client.Update(ctx, routing)
	if err == nil {
		return routing, key, sent, nil
	}
	c.mu.Lock()
	delete(c.handEdits, routing.Name+" "+key)
	c.mu.Unlock()
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, "", time.Time{}, fmt.Errorf("LoadBalancerRouting %s changed or went since it was read", routing.Name)
	}
	return nil, "", time.Time{}, fmt.Errorf("edit LoadBalancerRouting %s: %w", routing.Name, err)
}

// disturbNode picks a Node to disturb (see excuseNode) and calls disturb with it, its
// NetworkInterface and the routings that hold it; the excuse ends when disturb returns. Nothing
// is disturbed if no Node can be spared.
func (c *chaos) disturbNode(ctx context.Context, disturb func(node, nic string, held []string) error) error {
	node, nic := c.excuseNode()
	if node == "" {
		return nil
	}
	defer c.pardon(node)
	held, err := c.routingsHolding(ctx, nic)
	if err != nil {
		return err
	}
	return disturb(node, nic, held)
}

// excuseNode picks a present Node that is neither the next to leave nor already disturbed,
// and excuses its leaving routings until pardon.
func (c *chaos) excuseNode() (node, nic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var candidates []string
	oldest := ""
	for name := range c.present {
		if oldest == "" || name < oldest {
			oldest = name
		}
		if !c.excused[name] {
			candidates = append(candidates, name)
		}
	}
	// The oldest is the one the wave's Node churn lets leave.
	candidates = slices.DeleteFunc(candidates, func(name string) bool { return name == oldest })
	if len(candidates) == 0 {
		return "", ""
	}
	slices.Sort(candidates)
	node = candidates[c.random.IntN(len(candidates))]
	c.excused[node] = true
	return node, testenv.NetworkInterfaceName(node)
}

// pardon ends a Node's excuse, but its drops stay excused a while longer. A routing the run did
// not wait for (one that still held the Node, not rewritten yet, looks back already) may still
// lose it: a write the CCM computed while the Node was disturbed can reach IronCore up to
// slowFault late, when the faults hold it back; in selector mode, IronCore's LoadBalancer
// controller, one routing at a time, may still be recomputing one from then.
func (c *chaos) pardon(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.excused, node)
	grace := slowFault + time.Second + c.opts.Slack
	if c.opts.Selecting {
		grace += unservableBound + time.Duration(len(c.seen))*ironcoreRoutingPace
	}
	c.excusedUntil[node] = time.Now().Add(grace)
}

// ironcoreRoutingPace is about how long IronCore's LoadBalancer controller takes per routing on
// the test stack (17-22 s for 350-400 routings).
const ironcoreRoutingPace = 50 * time.Millisecond

// isExcused tells whether the Node's drops are excused now. The caller holds c.mu.
func (c *chaos) isExcused(node string, now time.Time) bool {
	return c.excused[node] || now.Before(c.excusedUntil[node])
}

// routingsHolding names the routings that hold the NetworkInterface, of Services that are not
// Local (a Local Service's routing holds the Nodes of its endpoints only). Early in a run, it
// waits a little for the first.
func (c *chaos) routingsHolding(ctx context.Context, nic string) ([]string, error) {
	var held []string
	err := testenv.WaitFor(ctx, 30*time.Second, "a routing holding "+nic, func(ctx context.Context) error {
		routings := &networkingv1alpha1.LoadBalancerRoutingList{}
		if err := c.stack.IronCore.Client.List(ctx, routings, client.InNamespace(c.stack.Namespace)); err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		held = nil
		for i := range routings.Items {
			if state := c.byLoadBalancer[routings.Items[i].Name]; state != nil && !state.local && destinations(&routings.Items[i])["nic:"+nic] {
				held = append(held, routings.Items[i].Name)
			}
		}
		if len(held) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	return held, nil
}

// waitForRoutings waits until none (held false) or all (held true) of the routings hold the
// NetworkInterface, counting only routings that still exist, of Services that still exist and
// are not Local. It returns how long that took; past targetBound it records a problem.
func (c *chaos) waitForRoutings(ctx context.Context, routings []string, nic string, held bool, what string) time.Duration {
	started := time.Now()
	var missing []string
	condition := func(context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		missing = nil
		for _, name := range routings {
			state := c.byLoadBalancer[name]
			seen, ok := c.seen[name]
			if state == nil || state.local || c.services[state.service.Name] != state || !ok {
				continue
			}
			if seen.destinations["nic:"+nic] != held {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d routings, the first %s", len(missing), missing[0])
		}
		return nil
	}
	err := testenv.WaitFor(ctx, targetBound, what, condition)
	if err != nil {
		verb := "leave"
		if held {
			verb = "take back"
		}
		// How late, if at all: IronCore slow, or a routing left behind for good.
		first := ""
		if len(missing) > 0 {
			first = c.describeLoadBalancer(ctx, missing[0])
		}
		late := "and had not after 3 more minutes"
		if testenv.WaitFor(ctx, 3*time.Minute, what, condition) == nil {
			late = fmt.Sprintf("and did %s after the first wait began", time.Since(started).Round(time.Second))
		}
		c.problem("%s: the routings did not %s %s within %s (%v; %s), %s", what, verb, nic, targetBound, err, first, late)
	}
	return time.Since(started)
}

// describeLoadBalancer says what a routing's LoadBalancer and its Service look like, for a
// problem's message.
func (c *chaos) describeLoadBalancer(ctx context.Context, name string) string {
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := c.stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: c.stack.Namespace, Name: name}, lb); err != nil {
		return fmt.Sprintf("LoadBalancer %s: %v", name, err)
	}
	c.mu.Lock()
	state := c.byLoadBalancer[name]
	c.mu.Unlock()
	service := "no Service"
	if state != nil {
		service = fmt.Sprintf("Service %s (internal %t, local %t, class %v)", state.service.Name, state.internal, state.local, state.service.Spec.LoadBalancerClass)
	}
	return fmt.Sprintf("LoadBalancer %s: type %s, selector %v, deleting %t, annotations %v; %s",
		name, lb.Spec.Type, lb.Spec.NetworkInterfaceSelector, !lb.DeletionTimestamp.IsZero(), lb.Annotations, service)
}

// stillWanted tells whether the Service of the routing still wants the destination: it may
// have switched policy, its endpoints may have moved, and the Node may no longer serve.
func (c *chaos) stillWanted(routing, key string, local bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	state := c.byLoadBalancer[routing]
	node, ok := c.nodeOf(key)
	return state != nil && state.local == local && ok && (!local || slices.Contains(state.endpoints, node)) &&
		c.canServe(node) && c.services[state.service.Name] == state
}

// nodeOf names the present Node of a destination key. The caller holds c.mu.
func (c *chaos) nodeOf(key string) (string, bool) {
	for node := range c.present {
		if key == "nic:"+testenv.NetworkInterfaceName(node) {
			return node, true
		}
		for _, ip := range c.nodeIPs[node] {
			if key == "ip:"+ip {
				return node, true
			}
		}
	}
	return "", false
}

// setDeletionTaint adds or removes the cluster autoscaler's deletion taint on the Node.
func (c *chaos) setDeletionTaint(ctx context.Context, name string, on bool) error {
	nodes := c.stack.TargetClientset.CoreV1().Nodes()
	for {
		node, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == servicecontroller.ToBeDeletedTaint })
		if on {
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: servicecontroller.ToBeDeletedTaint, Value: "1", Effect: corev1.TaintEffectNoSchedule})
		}
		_, err = nodes.Update(ctx, node, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}
