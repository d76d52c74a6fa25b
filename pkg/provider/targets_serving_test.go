package provider_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// servingHarness is a Cluster Service on three Ready Nodes, with the targets controller
// running, in one target mode. In selector mode a Local Service shares the Network, so that
// IronCore v0.5.0 misses label changes for the selecting LoadBalancer unless the CCM nudges it.
type servingHarness struct {
	*targetsHarness
	names   []string
	nodes   []*corev1.Node
	lbName  string
	watcher *ipWatcher
}

func startServing(t *testing.T, prefix string, useSelector bool) *servingHarness {
	t.Helper()
	h := startTargets(t, func(o *config.Options) { o.UseNICSelector = useSelector })
	names := []string{prefix + "1", prefix + "2", prefix + "3"}
	nodes := workerNodes(t, names...)
	h.waitForNodesInLister(t, nodes)
	service := createService(t, prefix+"svc", testenv.ServiceOptions{})
	lbName := lbspec.Name(service)
	watcher := watchRoutingIPs(t, lbName)
	ensureUntilReady(t, h.lbs, service, nodes)
	if useSelector {
		local := createService(t, prefix+"local", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
		ensureUntilReady(t, h.lbs, local, nodes)
	}
	waitForRoutingToInclude(t, lbName, stack.NetworkInterfaceIPs(t, names...))
	return &servingHarness{targetsHarness: h, names: names, nodes: nodes, lbName: lbName, watcher: watcher}
}

// barrier makes the last of the harness's Nodes unhealthy and waits until the routing drops
// it: every sync that led there ran after whatever the test did before, so what the routing
// holds then is what the rules chose from it.
func (h *servingHarness) barrier(t *testing.T) {
	t.Helper()
	taintNode(t, h.names[2])
	waitForRoutingToExclude(t, h.lbName, stack.NetworkInterfaceIPs(t, h.names[2]))
}

var targetModes = []struct {
	name        string
	useSelector bool
}{{"explicit", false}, {"selector", true}}

// TestANodeThatWasNeverReadyIsNoTarget: a Node that registers as a kubelet does on its first
// start, NotReady, initialized and with a running Machine and an Available NetworkInterface,
// is in no routing however many syncs pass, and joins once Ready. In both target modes.
func TestANodeThatWasNeverReadyIsNoTarget(t *testing.T) {
	for _, mode := range targetModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			prefix := "neverready-" + mode.name + "-"
			h := startServing(t, prefix, mode.useSelector)
			joining := prefix + "joining"
			workerMachine(t, joining)
			// As a kubelet registers it on its first start.
			h.waitForNodesInLister(t, []*corev1.Node{stack.CreateNodeForTest(t, joining, testenv.NodeOptions{ProviderID: providerIDOf(joining), NotReady: true})})

			h.barrier(t)
			ip := stack.NetworkInterfaceIPs(t, joining)[0]
			if h.watcher.had(ip) {
				t.Fatalf("the routing sent traffic to %s, a Node that was never Ready", joining)
			}
			if mode.useSelector && hasTargetLabel(t, joining) {
				t.Fatalf("the NetworkInterface of %s, a Node that was never Ready, is labelled a target", joining)
			}

			if _, err := stack.SetNodeReady(ctx, joining, corev1.ConditionTrue); err != nil {
				t.Fatal(err)
			}
			waitForRoutingToInclude(t, h.lbName, []string{ip})
		})
	}
}

// TestADeletedMachineLeavesEveryRouting: a Machine being deleted while its Node still looks
// Ready (fresh heartbeats, as before the node lifecycle controller notices) takes its Node out
// of the routing without any other change: while a finalizer holds the Machine (as
// machinepoollet's does) with its NetworkInterface still Available, and once it is gone. In
// both target modes.
func TestADeletedMachineLeavesEveryRouting(t *testing.T) {
	for _, mode := range targetModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			h := startServing(t, "machinegone-"+mode.name+"-", mode.useSelector)
			gone := h.names[0]
			ips := stack.NetworkInterfaceIPs(t, gone)
			machine := &computev1alpha1.Machine{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: gone}, machine); err != nil {
				t.Fatal(err)
			}
			base := machine.DeepCopy()
			machine.Finalizers = append(machine.Finalizers, "test.ironcore.dev/held")
			if err := stack.IronCore.Client.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
				t.Fatal(err)
			}
			if err := stack.IronCore.Client.Delete(ctx, machine); err != nil {
				t.Fatal(err)
			}
			waitForRoutingToExclude(t, h.lbName, ips)
			if nic := networkInterface(t, gone); nic.Status.State != networkingv1alpha1.NetworkInterfaceStateAvailable {
				t.Fatalf("the NetworkInterface was to stay Available while its Machine is being deleted: %s", nic.Status.State)
			}

			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
				t.Fatal(err)
			}
			base = machine.DeepCopy()
			machine.Finalizers = nil
			if err := stack.IronCore.Client.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
				t.Fatal(err)
			}
			h.barrier(t)
			if got, err := routingIPs(ctx, h.lbName); err != nil || slices.Contains(got, ips[0]) {
				t.Fatalf("the Node of a deleted Machine is back in the routing: %v %v", got, err)
			}
			if node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, gone, metav1.GetOptions{}); err != nil || !nodeReady(node) {
				t.Fatalf("the Node was to stay Ready while its Machine went: %v", err)
			}
			waitForRoutingToInclude(t, h.lbName, stack.NetworkInterfaceIPs(t, h.names[1]))
		})
	}
}

// TestANetworkInterfaceInErrorIsNoTarget: a NetworkInterface that goes to Error, keeping its
// addresses, leaves the routing, and comes back once Available again. In both target modes.
func TestANetworkInterfaceInErrorIsNoTarget(t *testing.T) {
	for _, mode := range targetModes {
		t.Run(mode.name, func(t *testing.T) {
			h := startServing(t, "nicerror-"+mode.name+"-", mode.useSelector)
			broken := h.names[0]
			ips := stack.NetworkInterfaceIPs(t, broken)
			nic := networkInterface(t, broken)
			stack.Simulator.Hold(nic)
			t.Cleanup(func() { stack.Simulator.Release(nic) })
			setNetworkInterfaceState(t, broken, networkingv1alpha1.NetworkInterfaceStateError)
			waitForRoutingToExclude(t, h.lbName, ips)
			waitForRoutingToInclude(t, h.lbName, stack.NetworkInterfaceIPs(t, h.names[1], h.names[2]))
			setNetworkInterfaceState(t, broken, networkingv1alpha1.NetworkInterfaceStateAvailable)
			waitForRoutingToInclude(t, h.lbName, ips)
		})
	}
}

// setNetworkInterfaceState sets the state of the Machine's NetworkInterface, keeping its
// addresses, as apinetlet reports a failure.
func setNetworkInterfaceState(t *testing.T, machine string, state networkingv1alpha1.NetworkInterfaceState) {
	t.Helper()
	nic := networkInterface(t, machine)
	base := nic.DeepCopy()
	nic.Status.State = state
	if err := stack.IronCore.Client.Status().Patch(context.Background(), nic, client.MergeFrom(base)); err != nil {
		t.Fatal(fmt.Errorf("set NetworkInterface %s to %s: %w", nic.Name, state, err))
	}
	if len(nic.Status.IPs) == 0 {
		t.Fatalf("NetworkInterface %s has no addresses to keep", nic.Name)
	}
}

func nodeReady(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

// TestARoutingStrippedOfItsOwnerIsRepaired: a routing the CCM writes whose ownerReferences are
// removed by hand is written back by the watch, without a resync or any other change.
func TestARoutingStrippedOfItsOwnerIsRepaired(t *testing.T) {
	ctx := context.Background()
	h := startServing(t, "ownerless-", false)
	routing := &networkingv1alpha1.LoadBalancerRouting{}
	key := client.ObjectKey{Namespace: stack.Namespace, Name: h.lbName}
	if err := stack.IronCore.Client.Get(ctx, key, routing); err != nil {
		t.Fatal(err)
	}
	base := routing.DeepCopy()
	routing.OwnerReferences = nil
	if err := stack.IronCore.Client.Patch(ctx, routing, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	stack.WaitForIronCore(t, waitTimeout, "the routing's owner back", routing, func() error {
		if len(routing.OwnerReferences) == 0 {
			return fmt.Errorf("no owner")
		}
		return nil
	})
	waitForRoutingToInclude(t, h.lbName, stack.NetworkInterfaceIPs(t, h.names...))
}

// TestADeletionRightAfterATypeSwitchLeavesNoLoadBalancer: a Service deleted right after a type
// switch began, before the cache shows the LoadBalancer the switch created, leaves neither
// LoadBalancer behind.
func TestADeletionRightAfterATypeSwitchLeavesNoLoadBalancer(t *testing.T) {
	ctx := context.Background()
	_, lbs, nodes, service, internalLB := readyService(t, "lb-switch-delete-1", "switch-delete", keys.AnnotationInternalLoadBalancer)
	name := lbspec.Name(service)

	release := stack.IronCoreProxy.HoldWatches("loadbalancers.networking.ironcore.dev")
	t.Cleanup(release)
	service = service.DeepCopy()
	service.Annotations[keys.AnnotationInternalLoadBalancer] = "false"
	if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes); err != nil && !isRetry(err) {
		t.Fatal(err)
	}
	successor := ironcoreLoadBalancer(t, name+"-public")
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	release()
	waitForLoadBalancerGone(t, internalLB)
	waitForLoadBalancerGone(t, successor)
}

func isRetry(err error) bool {
	var retry *api.RetryError
	return errors.As(err, &retry)
}

// TestATargetsGraceEndsAfterARestart: a target that went NotReady shortly before the CCM
// restarted stays one for the rest of its grace period, read from the routing IronCore has,
// and leaves when the period ends, although the new process never saw it Ready.
func TestATargetsGraceEndsAfterARestart(t *testing.T) {
	ctx := context.Background()
	names := []string{"restart-grace-1", "restart-grace-2", "restart-grace-3"}
	nodes := workerNodes(t, names...)
	service := createService(t, "restart-grace", testenv.ServiceOptions{})
	lbName := lbspec.Name(service)
	t.Run("before the restart", func(t *testing.T) {
		h := startTargets(t, func(o *config.Options) { o.UseNICSelector = false })
		h.waitForNodesInLister(t, nodes)
		ensureUntilReady(t, h.lbs, service, nodes)
		waitForRoutingToInclude(t, lbName, stack.NetworkInterfaceIPs(t, names...))
	})
	if t.Failed() {
		t.FailNow()
	}
	// NotReady since 55 s ago: a target until the grace period of 75 s ends 20 s later, time
	// enough for the restart and the write below on a slow machine.
	if _, err := stack.SetNodeReadySince(ctx, names[0], corev1.ConditionFalse, time.Now().Add(-55*time.Second)); err != nil {
		t.Fatal(err)
	}
	h := startTargets(t, func(o *config.Options) {
		o.UseNICSelector = false
		o.UnreadyGracePeriod = 75 * time.Second
	})
	h.waitForNodesInLister(t, nodes)
	ips := stack.NetworkInterfaceIPs(t, names[0])
	// Another Node's change makes the new process write the routing while the grace lasts.
	taintNode(t, names[2])
	waitForRoutingToExclude(t, lbName, stack.NetworkInterfaceIPs(t, names[2]))
	if got, err := routingIPs(ctx, lbName); err != nil || !slices.Contains(got, ips[0]) {
		t.Fatalf("a target within its grace period left the routing after a restart: %v %v", got, err)
	}
	waitForRoutingToExclude(t, lbName, ips)
}
