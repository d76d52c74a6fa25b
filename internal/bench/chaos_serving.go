package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// IronCore LoadBalancers have no health checks: a routing that holds a Node that cannot serve
// black-holes its share of the traffic. The run checks, as it happens, that the CCM stops
// sending traffic to a Node whose Machine is being deleted or gone, whose NetworkInterface is
// not Available, or that has never been Ready, within unservableBound plus the time to write
// each routing it writes again (routingWrite each: four times what its default budget of 200
// IronCore requests a second allows, and what the budget of 50 it had once allowed). The CCM writes every routing in the default mode, and those of Local Services in
// selector mode. There, the routings of the other Services are IronCore's: the CCM's part is
// the target label, which must leave such a Node's NetworkInterface within unservableBound;
// IronCore's LoadBalancer controller then recomputes the routings one at a time (about 50 ms
// each on the test stack: 17-22 s for 350-400 routings), so those are held to targetBound and
// their times reported. Under faults, a leader's takeover included, every bound is targetBound.
const (
	unservableBound = 2 * time.Second
	routingWrite    = 25 * time.Millisecond
)

// notReadyHold is how long a joining Node stays NotReady (never Ready) after it is initialized:
// the CCM has seen it, and must keep it out of every routing, for that long.
const notReadyHold = 5 * time.Second

// servingChaos disturbs, once faults are off, the Nodes' ability to serve in the three ways a
// health check would catch, and measures how long each takes to reach every routing: a
// Machine deleted without draining while its Node still looks Ready (the Node then leaves the
// cluster), a NetworkInterface in Error and Available again, and a Node joining NotReady until
// it is Ready.
func (c *chaos) servingChaos(ctx context.Context) error {
	if err := c.deleteMachineAbruptly(ctx); err != nil {
		return err
	}
	if err := c.breakNetworkInterface(ctx); err != nil {
		return err
	}
	return c.joinNotReady(ctx)
}

// deleteMachineAbruptly deletes a Node's Machine as an operator or IronCore's eviction would,
// with the Node still Ready, waits until no routing holds it, and then lets the Node go
// (NotReady, so that the CCM deletes it).
func (c *chaos) deleteMachineAbruptly(ctx context.Context) error {
	node, nic := c.pickServing()
	if node == "" {
		return nil
	}
	held, err := c.routingsHolding(ctx, nic)
	if err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.present, node)
	c.leaving[node] = true
	c.mu.Unlock()
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: c.stack.Namespace, Name: node}}
	if err := c.stack.IronCore.Client.Delete(ctx, machine); err != nil {
		return fmt.Errorf("delete Machine %s: %w", node, err)
	}
	left := c.waitForRoutings(ctx, held, nic, false, fmt.Sprintf("Machine %s deleted, its Node still Ready", node))
	if _, err := c.stack.SetNodeReady(ctx, node, corev1.ConditionUnknown); err != nil {
		return err
	}
	if err := c.moveEndpointsOff(ctx, node); err != nil {
		return err
	}
	c.mu.Lock()
	c.result.NodesLeft++
	c.result.MachineGoneLeftSeconds = append(c.result.MachineGoneLeftSeconds, newSeconds(left))
	c.mu.Unlock()
	c.log("Machine %s deleted with its Node Ready: out of %d routings after %s", node, len(held), left.Round(time.Millisecond))
	return nil
}

// breakNetworkInterface has the provider report a Node's NetworkInterface in Error (its
// addresses kept) until no routing holds it, then Available until every routing that held it
// holds it again.
func (c *chaos) breakNetworkInterface(ctx context.Context) error {
	return c.disturbNode(ctx, func(_, nic string, held []string) error {
		object := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: c.stack.Namespace, Name: nic}}
		c.stack.Simulator.Break(object)
		left := c.waitForRoutings(ctx, held, nic, false, "NetworkInterface "+nic+" in Error")
		c.stack.Simulator.Mend(object)
		back := c.waitForRoutings(ctx, held, nic, true, "NetworkInterface "+nic+" Available again")
		c.mu.Lock()
		c.result.NICErrorLeftSeconds = append(c.result.NICErrorLeftSeconds, newSeconds(left))
		c.result.NICErrorBackSeconds = append(c.result.NICErrorBackSeconds, newSeconds(back))
		c.mu.Unlock()
		c.log("NetworkInterface %s in Error: out of %d routings after %s, back in them %s after it was Available", nic, len(held),
			left.Round(time.Millisecond), back.Round(time.Millisecond))
		return nil
	})
}

// joinNotReady lets a Node join as a kubelet registers it on its first start, NotReady; it
// stays so for notReadyHold after the CCM initialized it, then turns Ready, and the run
// measures until every routing of a Service that is not Local holds it.
func (c *chaos) joinNotReady(ctx context.Context) error {
	c.mu.Lock()
	next := c.nextNode
	c.nextNode++
	c.mu.Unlock()
	name := nodeName(next)
	if err := c.runMachine(ctx, next); err != nil {
		return err
	}
	if err := c.addNodeWith(ctx, next, true); err != nil {
		return err
	}
	err := testenv.WaitFor(ctx, targetBound, "Node "+name+" to be initialized", func(ctx context.Context) error {
		node, err := c.stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if node.Spec.ProviderID == "" {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err != nil {
		c.problem("%v", err)
	}
	time.Sleep(notReadyHold) // the Node stays NotReady this long: part of the scenario
	routings, err := c.routingsOfClusterServices(ctx)
	if err != nil {
		return err
	}
	if _, err := c.stack.SetNodeReady(ctx, name, corev1.ConditionTrue); err != nil {
		return err
	}
	joined := c.waitForRoutings(ctx, routings, testenv.NetworkInterfaceName(name), true, "Node "+name+" Ready for the first time")
	c.mu.Lock()
	c.result.NodesJoined++
	c.result.NotReadyJoinSeconds = append(c.result.NotReadyJoinSeconds, newSeconds(joined))
	c.mu.Unlock()
	c.log("Node %s joined NotReady: in no routing for %s, then in %d routings %s after it was Ready", name, notReadyHold,
		len(routings), joined.Round(time.Millisecond))
	return nil
}

// pickServing picks a present Node that is not disturbed and not the next to leave; "" if there
// is none.
func (c *chaos) pickServing() (node, nic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var candidates []string
	for name := range c.present {
		if !c.excused[name] {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) < 2 {
		return "", ""
	}
	slices.Sort(candidates)
	// Not the oldest: the next wave's Node churn lets it leave.
	candidates = candidates[1:]
	node = candidates[c.random.IntN(len(candidates))]
	return node, testenv.NetworkInterfaceName(node)
}

// moveEndpointsOff moves the endpoints of every Local Service that has one on the Node.
func (c *chaos) moveEndpointsOff(ctx context.Context, node string) error {
	c.mu.Lock()
	var moved []*chaosService
	for _, state := range c.services {
		if state.local && slices.Contains(state.endpoints, node) {
			moved = append(moved, state)
		}
	}
	c.mu.Unlock()
	for _, state := range moved {
		if err := c.placeEndpoints(ctx, state); err != nil {
			return err
		}
	}
	return nil
}

// routingsOfClusterServices names the routings of the current Services that are not Local:
// each must hold every Node that can serve.
func (c *chaos) routingsOfClusterServices(ctx context.Context) ([]string, error) {
	routings := &networkingv1alpha1.LoadBalancerRoutingList{}
	if err := c.stack.IronCore.Client.List(ctx, routings, client.InNamespace(c.stack.Namespace)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for i := range routings.Items {
		state := c.byLoadBalancer[routings.Items[i].Name]
		if state != nil && !state.local && c.services[state.service.Name] == state && routings.Items[i].DeletionTimestamp == nil {
			names = append(names, routings.Items[i].Name)
		}
	}
	return names, nil
}

// markUnservable records that the NetworkInterface's Node cannot serve, for why, from now on
// (or from when it was first recorded); clearUnservable ends it.
func (c *chaos) markUnservable(nic, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unservable[nic] == nil {
		c.unservable[nic] = map[string]time.Time{}
	}
	if _, ok := c.unservable[nic][why]; !ok {
		c.unservable[nic][why] = time.Now()
	}
}

func (c *chaos) clearUnservable(nic, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.unservable[nic], why)
	if len(c.unservable[nic]) == 0 {
		delete(c.unservable, nic)
	}
}

// checkServing records a problem for every routing that holds a Node that cannot serve past
// its bound, and in selector mode for every such Node's NetworkInterface that still carries the
// target label past unservableBound of calm time. A routing the CCM writes is bound by
// unservableBound and routingWrite per routing it writes, of calm time (faults off), and by
// targetBound in all; one of IronCore's by targetBound. A Local Service none of whose
// endpoints' Nodes can serve is left out: the CCM's documented fail-open keeps its routing as
// it is.
func (c *chaos) checkServing(routings []networkingv1alpha1.LoadBalancerRouting, now time.Time) {
	var problems []string
	defer func() {
		for _, problem := range problems {
			c.log("PROBLEM: %s", problem)
		}
	}()
	c.mu.Lock()
	defer c.mu.Unlock()
	written := 0
	for i := range routings {
		if state := c.byLoadBalancer[routings[i].Name]; state != nil && c.writtenByCCM(state) {
			written++
		}
	}
	bound := c.opts.unservableBound() + time.Duration(written)*routingWrite
	held := func(key, what string, since time.Time, bound time.Duration) {
		calm := now.Sub(since) - c.faultyWithin(since, now)
		if (calm <= bound && now.Sub(since) <= targetBound) || c.unservableHeld[key] {
			return
		}
		c.unservableHeld[key] = true
		c.result.UnservableHeld++
		problem := fmt.Sprintf("%s for %s, %s of it with faults off (bound %s, or %s in all)",
			what, now.Sub(since).Round(time.Millisecond), calm.Round(time.Millisecond), bound, targetBound)
		c.result.Problems = append(c.result.Problems, problem)
		problems = append(problems, problem)
	}
	if c.opts.Selecting {
		for nic, labelled := range c.labelled {
			if why, since := c.unservableSince(nic); labelled && !since.IsZero() {
				held("label "+nic+" "+since.String(), fmt.Sprintf("NetworkInterface %s (%s) kept the target label", nic, why), since, c.opts.unservableBound())
			}
		}
	}
	for i := range routings {
		routing := &routings[i]
		state := c.byLoadBalancer[routing.Name]
		if state == nil || c.services[state.service.Name] != state || routing.DeletionTimestamp != nil {
			continue
		}
		if state.local && !slices.ContainsFunc(state.endpoints, c.canServe) {
			continue
		}
		routingBound := targetBound
		if c.writtenByCCM(state) {
			routingBound = bound
		}
		for _, destination := range routing.Destinations {
			if destination.TargetRef == nil {
				continue
			}
			nic := destination.TargetRef.Name
			if why, since := c.unservableSince(nic); !since.IsZero() {
				held(routing.Name+" "+nic+" "+since.String(), fmt.Sprintf("LoadBalancerRouting %s held NetworkInterface %s (%s)", routing.Name, nic, why), since, routingBound)
			}
		}
	}
}

// writtenByCCM tells whether the CCM writes the routing of the Service: every routing in the
// default mode, a Local Service's in selector mode. The caller holds c.mu.
func (c *chaos) writtenByCCM(state *chaosService) bool {
	return !c.opts.Selecting || state.local
}

// unservableSince is the first reason the NetworkInterface's Node cannot serve and since when;
// zero if it can. The caller holds c.mu.
func (c *chaos) unservableSince(nic string) (why string, since time.Time) {
	for reason, at := range c.unservable[nic] {
		if since.IsZero() || at.Before(since) {
			why, since = reason, at
		}
	}
	return why, since
}

// canServe tells whether a Node is present, not disturbed on purpose and able to serve. The
// caller holds c.mu.
func (c *chaos) canServe(node string) bool {
	return c.present[node] && !c.excused[node] && len(c.unservable[testenv.NetworkInterfaceName(node)]) == 0
}

// faultyWithin is how much of [from, to] faults were on. The caller holds c.mu.
func (c *chaos) faultyWithin(from, to time.Time) time.Duration {
	var faulty time.Duration
	for _, window := range c.faultWindows {
		end := window.end
		if end.IsZero() {
			end = to
		}
		start := max(window.start.UnixNano(), from.UnixNano())
		if stop := min(end.UnixNano(), to.UnixNano()); stop > start {
			faulty += time.Duration(stop - start)
		}
	}
	return faulty
}

// faultWindow is a time during which faults were on; end is zero while they still are.
type faultWindow struct {
	start, end time.Time
}

// machineChanged records a Machine being deleted or gone as its NetworkInterface unservable.
func (c *chaos) machineChanged(machine *computev1alpha1.Machine, gone bool) {
	if gone || machine.DeletionTimestamp != nil {
		c.markUnservable(testenv.NetworkInterfaceName(machine.Name), "its Machine deleted")
	}
}

// networkInterfaceChanged records a NetworkInterface that is not Available, or gone, as
// unservable, and one Available again as able to serve.
func (c *chaos) networkInterfaceChanged(nic *networkingv1alpha1.NetworkInterface, gone bool) {
	c.mu.Lock()
	if !gone && nic.Labels[keys.LabelLoadBalancerTarget] != "" {
		c.labelled[nic.Name] = true
	} else {
		delete(c.labelled, nic.Name)
	}
	c.mu.Unlock()
	switch {
	case gone:
		c.markUnservable(nic.Name, "NetworkInterface deleted")
	case nic.Status.State == networkingv1alpha1.NetworkInterfaceStateAvailable:
		c.clearUnservable(nic.Name, "NetworkInterface not Available")
	default:
		c.markUnservable(nic.Name, "NetworkInterface not Available")
	}
}

// nodeReadiness records a Node that has never been Ready as unservable until it is.
func (c *chaos) nodeReadiness(node *corev1.Node) {
	nic := testenv.NetworkInterfaceName(node.Name)
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady && condition.Status == corev1.ConditionTrue {
			c.mu.Lock()
			c.everReady[node.Name] = true
			c.mu.Unlock()
			c.clearUnservable(nic, "Node never Ready")
			return
		}
	}
	c.mu.Lock()
	ever := c.everReady[node.Name]
	c.mu.Unlock()
	if !ever {
		c.markUnservable(nic, "Node never Ready")
	}
}
