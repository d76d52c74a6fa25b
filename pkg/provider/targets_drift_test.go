package provider_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// networkInterfacesResource is how the API proxy names NetworkInterfaces.
const networkInterfacesResource = "networkinterfaces.networking.ironcore.dev"

// TestAFlappingNodeIsNotLostToALaggingCache: while the CCM's NetworkInterface watch is held
// back, so that its cache shows none of its own label writes, a Node is tainted for deletion
// by the cluster autoscaler and untainted, twice. Each step must reach IronCore: the label
// reconciler decides from its own last write where the cache is older, so the untaint puts
// back the label the cache still shows, and the second taint removes the label the cache
// does not show yet.
func TestAFlappingNodeIsNotLostToALaggingCache(t *testing.T) {
	h := startTargets(t, nil)
	names := []string{"flap-1", "flap-2"}
	nodes := workerNodes(t, names...)
	h.waitForNodesInLister(t, nodes)
	service := createService(t, "flap", testenv.ServiceOptions{})
	ensureUntilReady(t, h.lbs, service, nodes)
	waitForNICLabel(t, names[0], true)
	waitForNICLabel(t, names[1], true)

	release := stack.IronCoreProxy.HoldWatches(networkInterfacesResource)
	t.Cleanup(release)
	for round := range 2 {
		taintNode(t, names[0])
		waitForNICLabel(t, names[0], false)
		untaintNode(t, names[0])
		waitForNICLabel(t, names[0], true)
		t.Logf("round %d: the label followed the Node with the watch held back", round+1)
	}
	release()
	waitForNICLabel(t, names[0], true)
	if !hasTargetLabel(t, names[1]) {
		t.Error("the Node that did not flap lost its target label")
	}
}

// driftNodes is the cluster size the drift tests run at.
const driftNodes = 50

// TestTargetDriftIsRepaired: at 50 Nodes, target labels removed by hand (selector mode) and
// routings edited by hand (a Local Service's in both modes, a Cluster Service's in explicit
// mode) are put back by the watch, long before the 10-minute resync and without any call from
// the service controller, with a Normal event on the Node or the Service and the drift counted.
// How fast is measured by make chaos, not here: a test's time is the machine's.
func TestTargetDriftIsRepaired(t *testing.T) {
	testenv.InTargetModes(t, func(t *testing.T, mode string, useSelector bool) {
		h := startTargets(t, func(o *config.Options) { o.UseNICSelector = useSelector })
		prefix := "drift-" + mode + "-"
		var names []string
		for i := range driftNodes {
			names = append(names, fmt.Sprintf("%s%d", prefix, i))
		}
		nodes := workerNodes(t, names...)
		h.waitForNodesInLister(t, nodes)
		service := createService(t, prefix+"svc", testenv.ServiceOptions{})
		local := createService(t, prefix+"local", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
		setEndpoints(t, local, endpointsOn(names[:3]...))
		ensureUntilReady(t, h.lbs, service, nodes)
		ensureUntilReady(t, h.lbs, local, nodes)
		stack.WaitForRouting(t, waitTimeout, lbspec.Name(service), stack.NetworkInterfaceIPs(t, names...))
		stack.WaitForRouting(t, waitTimeout, lbspec.Name(local), stack.NetworkInterfaceIPs(t, names[:3]...))

		if useSelector {
			// A first label put back: the nudge of the selecting LoadBalancer for the
			// targets as they are, which the Local Service's LoadBalancer (it does not
			// select) calls for.
			removeTargetLabel(t, names[2])
			waitForNICLabel(t, names[2], true)
			nudge := waitForTargetsNudge(t, lbspec.Name(service), "")
			before := driftRepaired(t, "label")
			started := time.Now()
			for _, name := range names[:2] {
				removeTargetLabel(t, name)
			}
			waitForNICLabel(t, names[0], true)
			waitForNICLabel(t, names[1], true)
			logRepairTime(t, "target labels removed by hand back", started)
			waitForNodeEvent(t, names[0], lbtargets.ReasonDriftRepaired, "was changed outside the CCM")
			if after := driftRepaired(t, "label"); after < before+2 {
				t.Errorf("drift repaired (label) went from %v to %v, want 2 more", before, after)
			}
			// The Local Service's LoadBalancer does not select: IronCore v0.5.0 may miss the
			// labels put back for the selecting ones, so the CCM nudges them, although no
			// target changed.
			waitForTargetsNudge(t, lbspec.Name(service), nudge)
			stack.WaitForRouting(t, waitTimeout, lbspec.Name(service), stack.NetworkInterfaceIPs(t, names...))
		} else {
			repairedRouting(t, service, stack.NetworkInterfaceIPs(t, names...))
		}
		repairedRouting(t, local, stack.NetworkInterfaceIPs(t, names[:3]...))
	}, testenv.ModeSelector, testenv.ModeExplicit)
}

// waitForTargetsNudge waits until the LoadBalancer's targets digest differs from before, and
// returns it.
func waitForTargetsNudge(t *testing.T, name, before string) string {
	t.Helper()
	var digest string
	err := testenv.WaitFor(context.Background(), waitTimeout, "LoadBalancer "+name+" nudged", func(ctx context.Context) error {
		lb := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
			return err
		}
		if digest = lb.Annotations[keys.AnnotationTargets]; digest == before {
			return fmt.Errorf("its targets digest is still %q", before)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	return digest
}

// repairedRouting edits the Service's routing by hand and requires it back as wanted, by the
// watch, with an event on the Service and the drift counted.
func repairedRouting(t *testing.T, service *corev1.Service, want []string) {
	t.Helper()
	lbName := lbspec.Name(service)
	before := driftRepaired(t, "routing")
	started := time.Now()
	dropDestinations(t, lbName, 2)
	stack.WaitForRouting(t, waitTimeout, lbName, want)
	logRepairTime(t, "the routing of "+service.Name+" edited by hand back", started)
	waitForEvent(t, service, lbtargets.ReasonDriftRepaired)
	if after := driftRepaired(t, "routing"); after < before+1 {
		t.Errorf("drift repaired (routing) went from %v to %v, want 1 more", before, after)
	}
}

// logRepairTime logs how long the repair of what started took. The waits before it bound it
// (waitTimeout, far below the targets' resync): the repair came from a watch.
func logRepairTime(t *testing.T, what string, started time.Time) {
	t.Helper()
	t.Logf("%s after %s", what, time.Since(started).Round(time.Millisecond))
}

// untaintNode removes the cluster autoscaler's deletion taint from the Node.
func untaintNode(t *testing.T, name string) {
	t.Helper()
	updateNode(t, name, func(node *corev1.Node) {
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == servicecontroller.ToBeDeletedTaint })
	})
}

// removeTargetLabel removes the target label from the Machine's NetworkInterface, as an
// operator's kubectl would.
func removeTargetLabel(t *testing.T, machine string) {
	t.Helper()
	nic := networkInterface(t, machine)
	base := nic.DeepCopy()
	delete(nic.Labels, keys.LabelLoadBalancerTarget)
	if err := stack.IronCore.Client.Patch(context.Background(), nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// dropDestinations removes the first destinations of the routing, as a script would.
func dropDestinations(t *testing.T, name string, drop int) {
	t.Helper()
	ctx := context.Background()
	routing := &networkingv1alpha1.LoadBalancerRouting{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, routing); err != nil {
		t.Fatal(err)
	}
	if len(routing.Destinations) < drop {
		t.Fatalf("the routing has %d destinations, fewer than the %d to drop", len(routing.Destinations), drop)
	}
	routing.Destinations = routing.Destinations[drop:]
	if err := stack.IronCore.Client.Update(ctx, routing); err != nil {
		t.Fatal(err)
	}
}

// driftRepaired reads the CCM's count of repaired drift of the kind.
func driftRepaired(t *testing.T, kind string) float64 {
	t.Helper()
	return testenv.Counter(t, metrics.LoadBalancerTargetDriftRepaired.WithLabelValues(kind))
}

// TestFlapsUnderLoadLoseNoTarget: 10 Nodes are each tainted for deletion by the cluster
// autoscaler and untainted 3 times within a second while 50 Services are created. Once it is
// quiet, every routing holds every Node: no flap is lost to a sync that decided from a cache
// behind the label writes.
func TestFlapsUnderLoadLoseNoTarget(t *testing.T) {
	h := startTargets(t, nil)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("flapload-%d", i))
	}
	nodes := workerNodes(t, names...)
	h.waitForNodesInLister(t, nodes)
	var services []*corev1.Service
	for i := range 50 {
		services = append(services, createService(t, fmt.Sprintf("flapload-%d", i), testenv.ServiceOptions{}))
	}

	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			for range 3 {
				taintNode(t, name)
				untaintNode(t, name)
			}
		})
	}
	work := make(chan *corev1.Service)
	for range 10 {
		wg.Go(func() {
			for service := range work {
				ensureUntilReady(t, h.lbs, service, nodes)
			}
		})
	}
	for _, service := range services {
		work <- service
	}
	close(work)
	wg.Wait()

	want := stack.NetworkInterfaceIPs(t, names...)
	for _, service := range services {
		waitForRoutingToInclude(t, lbspec.Name(service), want)
	}
	for _, name := range names {
		if !hasTargetLabel(t, name) {
			t.Errorf("the NetworkInterface of %s is not a target after its flaps", name)
		}
	}
}

// TestSelectingRoutingsFollowNodeHealthBesideALocalService: in selector mode, with a Local
// Service's LoadBalancer (which does not select) on the Network beside five selecting ones,
// Nodes go NotReady past the grace period and Ready again, one after another; every selecting
// routing leaves the Node and takes it back, by the watch. IronCore v0.5.0 alone would
// not recompute them (it stops at the LoadBalancer that does not select).
func TestSelectingRoutingsFollowNodeHealthBesideALocalService(t *testing.T) {
	ctx := context.Background()
	h := startTargets(t, func(o *config.Options) { o.UseNICSelector = true })
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("mixed-%d", i))
	}
	nodes := workerNodes(t, names...)
	h.waitForNodesInLister(t, nodes)
	local := createService(t, "mixed-local", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
	setEndpoints(t, local, endpointsOn(names[:2]...))
	ensureUntilReady(t, h.lbs, local, nodes)
	var selecting []string
	for i := range 5 {
		service := createService(t, fmt.Sprintf("mixed-%d", i), testenv.ServiceOptions{})
		ensureUntilReady(t, h.lbs, service, nodes)
		selecting = append(selecting, lbspec.Name(service))
	}
	for _, lbName := range selecting {
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names...))
	}

	for _, name := range names[2:] {
		ip := stack.NetworkInterfaceIPs(t, name)
		started := time.Now()
		if _, err := stack.SetNodeReadySince(ctx, name, corev1.ConditionFalse, time.Now().Add(-2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, lbName := range selecting {
			waitForRoutingToExclude(t, lbName, ip)
		}
		logRepairTime(t, "every selecting routing without NotReady "+name+" (after the grace period)", started)
		started = time.Now()
		if _, err := stack.SetNodeReady(ctx, name, corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
		for _, lbName := range selecting {
			waitForRoutingToInclude(t, lbName, ip)
		}
		logRepairTime(t, "every selecting routing with "+name+" Ready again", started)
	}
	for _, lbName := range selecting {
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names...))
	}
}
