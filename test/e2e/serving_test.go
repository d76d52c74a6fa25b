package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// servingNodes is the cluster size the serving test runs at, in each mode.
const servingNodes = 20

// TestOnlyNodesThatCanServeGetTraffic runs the binary in both target modes at 20 Nodes: a Node
// that registers NotReady and has never been Ready is in no routing until it is Ready, then
// joins; a Machine being deleted while its Node still looks Ready leaves the routing; a
// NetworkInterface in Error (addresses kept) leaves it and comes back once Available; one being
// deleted, and one released from its Machine, each with its state and addresses kept, leave it.
// How long each took is logged, not asserted.
func TestOnlyNodesThatCanServeGetTraffic(t *testing.T) {
	testenv.InTargetModes(t, func(t *testing.T, mode string, useSelector bool) {
		ctx := context.Background()
		startCCM(t, "ccm-serving-"+mode, fmt.Sprintf("--use-nic-selector=%t", useSelector))
		prefix := "serving-" + mode
		names := runningMachines(t, prefix, servingNodes+1, testenv.MachineOptions{})
		joining, names := names[servingNodes], names[:servingNodes]
		var wg sync.WaitGroup
		for _, name := range names {
			wg.Go(func() { createNode(t, name, testenv.NodeOptions{}) })
		}
		wg.Wait()
		for _, name := range names {
			waitForNode(t, name, "Node "+name+" to be initialized", initialized)
		}
		service := createService(t, prefix+"-svc", testenv.ServiceOptions{})
		waitForIngress(t, service, anyIngress)
		lbName := lbspec.Name(service)
		for _, name := range names {
			waitForDestination(t, lbName, stack.NetworkInterfaceIPs(t, name)[0], true)
		}
		// A Local Service shares the Network: then IronCore v0.5.0 misses label changes for a
		// selecting LoadBalancer unless the CCM nudges it.
		local := createService(t, prefix+"-local", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
		setEndpoints(t, local, names[0])
		waitForIngress(t, local, anyIngress)
		watcher := watchDestinationsOf(t, lbName)

		// A Node as a kubelet registers it on its first start: NotReady.
		createNode(t, joining, testenv.NodeOptions{NotReady: true})
		waitForNode(t, joining, "Node "+joining+" to be initialized", initialized)
		// Another Node's change is a barrier: the routing written for it was decided after the
		// joining Node was initialized.
		barrier := names[servingNodes-1]
		taint(t, barrier)
		waitForDestination(t, lbName, stack.NetworkInterfaceIPs(t, barrier)[0], false)
		joiningIP := stack.NetworkInterfaceIPs(t, joining)[0]
		if watcher.hadEver(joiningIP) {
			t.Fatalf("the routing sent traffic to %s, a Node that was never Ready", joining)
		}
		ready := time.Now()
		if _, err := stack.SetNodeReady(ctx, joining, corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
		t.Logf("a Node Ready for the first time joined the routing in %s", watcher.waitFor(t, joiningIP, true, ready))

		// A Machine being deleted, held by a finalizer as machinepoollet's holds it, while its
		// Node is Ready.
		deleted := names[1]
		deletedIP := stack.NetworkInterfaceIPs(t, deleted)[0]
		holdAndDeleteMachine(t, deleted)
		t.Logf("the Node of a Machine being deleted left the routing in %s", watcher.waitFor(t, deletedIP, false, time.Now()))

		// A NetworkInterface in Error, its addresses kept, and Available again.
		broken := names[2]
		brokenIP := stack.NetworkInterfaceIPs(t, broken)[0]
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(broken)}, nic); err != nil {
			t.Fatal(err)
		}
		stack.Simulator.Hold(nic)
		t.Cleanup(func() { stack.Simulator.Release(nic) })
		setNICState(t, broken, networkingv1alpha1.NetworkInterfaceStateError)
		t.Logf("a NetworkInterface in Error left the routing in %s", watcher.waitFor(t, brokenIP, false, time.Now()))
		setNICState(t, broken, networkingv1alpha1.NetworkInterfaceStateAvailable)
		t.Logf("a NetworkInterface Available again joined the routing in %s", watcher.waitFor(t, brokenIP, true, time.Now()))

		// A NetworkInterface being deleted, held by a finalizer, its state and addresses kept.
		deleting := names[3]
		deletingIP := stack.NetworkInterfaceIPs(t, deleting)[0]
		holdAndDelete(t, &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(deleting)}})
		t.Logf("a NetworkInterface being deleted left the routing in %s", watcher.waitFor(t, deletingIP, false, time.Now()))

		// A NetworkInterface released from its Machine (spec.machineRef cleared, as IronCore
		// releases one), its state and addresses kept, the Machine still listing it.
		detached := names[4]
		detachedIP := stack.NetworkInterfaceIPs(t, detached)[0]
		detach(t, detached)
		t.Logf("a NetworkInterface released from its Machine left the routing in %s", watcher.waitFor(t, detachedIP, false, time.Now()))
		if fewest := watcher.fewestSince(); fewest == 0 {
			t.Fatal("the routing fell to 0 destinations")
		}
	}, testenv.ModeExplicit, testenv.ModeSelector)
}

// taint taints the Node for deletion by the cluster autoscaler.
func taint(t *testing.T, name string) {
	t.Helper()
	patch := []byte(`{"spec":{"taints":[{"key":"ToBeDeletedByClusterAutoscaler","effect":"NoSchedule"}]}}`)
	if _, err := stack.TargetClientset.CoreV1().Nodes().Patch(context.Background(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// holdAndDeleteMachine deletes the Machine with a finalizer on it, which the test's cleanup
// removes.
func holdAndDeleteMachine(t *testing.T, name string) {
	t.Helper()
	machine := &metav1.PartialObjectMetadata{}
	machine.SetGroupVersionKind(computeMachineGVK)
	machine.SetNamespace(stack.Namespace)
	machine.SetName(name)
	holdAndDelete(t, machine)
}

// holdAndDelete deletes the IronCore object with a finalizer on it, which the test's cleanup
// removes.
func holdAndDelete(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	const finalizer = "test.ironcore.dev/held"
	patch := []byte(`{"metadata":{"finalizers":["` + finalizer + `"]}}`)
	if err := stack.IronCore.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.IronCore.Client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := stack.IronCore.Client.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// detach clears the claim of the Machine's NetworkInterface on it, with the provider held so
// that it neither claims it again nor changes its state.
func detach(t *testing.T, machine string) {
	t.Helper()
	ctx := context.Background()
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}, nic); err != nil {
		t.Fatal(err)
	}
	held := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: machine}}
	stack.Simulator.Hold(held)
	stack.Simulator.Hold(nic)
	t.Cleanup(func() {
		stack.Simulator.Release(nic)
		stack.Simulator.Release(held)
	})
	if err := stack.IronCore.Client.Patch(ctx, nic, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"machineRef":null}}`))); err != nil {
		t.Fatal(err)
	}
}

// setNICState sets the state of the Machine's NetworkInterface, keeping its addresses.
func setNICState(t *testing.T, machine string, state networkingv1alpha1.NetworkInterfaceState) {
	t.Helper()
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}, nic); err != nil {
		t.Fatal(err)
	}
	base := nic.DeepCopy()
	nic.Status.State = state
	if err := stack.IronCore.Client.Status().Patch(context.Background(), nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// computeMachineGVK is the kind of IronCore Machines.
var computeMachineGVK = computev1alpha1.SchemeGroupVersion.WithKind("Machine")

// destinationsWatcher records, from a watch that sees every change of one routing, when each
// destination address was last added or removed, whether it was ever held, and the fewest
// destinations the routing held.
type destinationsWatcher struct {
	mu      sync.Mutex
	held    map[string]bool
	ever    map[string]bool
	changed map[string]time.Time
	fewest  int
}

func watchDestinationsOf(t *testing.T, name string) *destinationsWatcher {
	t.Helper()
	w := &destinationsWatcher{held: map[string]bool{}, ever: map[string]bool{}, changed: map[string]time.Time{}, fewest: -1}
	stack.WatchRoutings(t, func(listed []networkingv1alpha1.LoadBalancerRouting) {
		for i := range listed {
			if listed[i].Name == name {
				w.observe(listed[i].Destinations)
			}
		}
	}, func(routing *networkingv1alpha1.LoadBalancerRouting, deleted bool) {
		if routing.Name != name {
			return
		}
		destinations := routing.Destinations
		if deleted {
			destinations = nil
		}
		w.observe(destinations)
	})
	return w
}

func (w *destinationsWatcher) observe(destinations []networkingv1alpha1.LoadBalancerDestination) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	held := make(map[string]bool, len(destinations))
	for _, destination := range destinations {
		ip := destination.IP.String()
		held[ip] = true
		w.ever[ip] = true
		if !w.held[ip] {
			w.changed[ip] = now
		}
	}
	for ip := range w.held {
		if !held[ip] {
			w.changed[ip] = now
		}
	}
	w.held = held
	if w.fewest < 0 || len(destinations) < w.fewest {
		w.fewest = len(destinations)
	}
}

// ever tells whether the routing held the address at any moment since the watch began.
func (w *destinationsWatcher) hadEver(ip string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ever[ip]
}

// fewestSince is the fewest destinations the routing held since the watch began.
func (w *destinationsWatcher) fewestSince() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fewest
}

// waitFor waits until the routing holds the address (or not) and returns how long after from
// the watch saw it change.
func (w *destinationsWatcher) waitFor(t *testing.T, ip string, held bool, from time.Time) time.Duration {
	t.Helper()
	var took time.Duration
	testenv.Await(t, context.Background(), waitTimeout, fmt.Sprintf("%s held: %t", ip, held), func(context.Context) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.held[ip] != held {
			return fmt.Errorf("held: %t", w.held[ip])
		}
		took = w.changed[ip].Sub(from)
		return nil
	})
	return took.Round(time.Millisecond)
}
