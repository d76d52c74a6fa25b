package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

const (
	waitTimeout = time.Minute
	// provisionTimeout bounds IronCore's own provisioning of a Machine's addresses. Its Prefix
	// allocator retries a contended allocation with a per-Prefix exponential backoff (and counts an
	// allocation younger than --prefix-allocation-timeout as failed), so when dozens of Machines
	// start at once a few wait a minute or more for an address that is not ours to give.
	provisionTimeout = 3 * waitTimeout
	// shutdownTaint is what the node lifecycle controller puts on a Node whose Machine is off.
	shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"
)

// runningMachine creates a Machine and waits until IronCore reports it running with addresses.
func runningMachine(t *testing.T, name string, opts testenv.MachineOptions) *computev1alpha1.Machine {
	t.Helper()
	machine := stack.CreateMachineForTest(t, name, opts)
	nicKey := client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(name)}
	stack.WaitForIronCore(t, provisionTimeout, "Machine "+name+" running with addresses", machine, func() error {
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := stack.IronCore.Client.Get(context.Background(), nicKey, nic); err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning || len(nic.Status.IPs) == 0 {
			return fmt.Errorf("machine %q, interface IPs %v", machine.Status.State, nic.Status.IPs)
		}
		return nil
	})
	return machine
}

// runningMachines creates count Machines named <prefix>-NN at once and waits until all run
// with addresses; it returns their names.
func runningMachines(t *testing.T, prefix string, count int, opts testenv.MachineOptions) []string {
	t.Helper()
	names := numbered(prefix, count)
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() { runningMachine(t, name, opts) })
	}
	wg.Wait()
	return names
}

// numbered names count things <prefix>-NN.
func numbered(prefix string, count int) []string {
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return names
}

// createMachines creates the Machines at once, each deleted with its Node when the test ends.
func createMachines(t *testing.T, names []string, opts testenv.MachineOptions) {
	t.Helper()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			if _, err := stack.CreateMachine(context.Background(), name, opts); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, name := range names {
			_ = stack.IronCore.Client.Delete(context.Background(), &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}})
			_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
}

func createNode(t *testing.T, name string, opts testenv.NodeOptions) {
	t.Helper()
	stack.CreateNodeForTest(t, name, opts)
}

// waitForNode polls the Node until check accepts it.
func waitForNode(t *testing.T, name, what string, check func(*corev1.Node) error) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	testenv.Await(t, context.Background(), waitTimeout, what, func(ctx context.Context) error {
		var err error
		node, err = stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return check(node)
	})
	return node
}

// initialized accepts a Node the CCM has initialized: no taint, a provider ID, and the
// addresses, which the framework sets right after removing the taint.
func initialized(node *corev1.Node) error {
	if hasTaint(node, cloudproviderapi.TaintExternalCloudProvider) {
		return errors.New("still tainted uninitialized")
	}
	if node.Spec.ProviderID == "" {
		return errors.New("no provider ID")
	}
	if len(node.Status.Addresses) == 0 {
		return errors.New("no addresses")
	}
	return nil
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == key })
}

func TestNodeLifecycle(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-node-lifecycle")
	machine := runningMachine(t, "worker-1", testenv.MachineOptions{Pool: "pool-a", VirtualIP: true})

	created := time.Now()
	createNode(t, "worker-1", testenv.NodeOptions{})
	node := waitForNode(t, "worker-1", "the Node to be initialized", initialized)
	t.Logf("Node initialized %s after it was created", time.Since(created).Round(time.Millisecond))

	nic := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName("worker-1")}, nic); err != nil {
		t.Fatal(err)
	}
	if want := "ironcore://" + stack.Namespace + "/worker-1"; node.Spec.ProviderID != want {
		t.Errorf("provider ID %q, want %q", node.Spec.ProviderID, want)
	}
	for label, want := range map[string]string{
		corev1.LabelInstanceTypeStable: testenv.MachineClass,
		corev1.LabelTopologyZone:       "zone-a",
		corev1.LabelTopologyRegion:     "region-1",
		keys.LabelMachinePool:          "pool-a",
	} {
		if node.Labels[label] != want {
			t.Errorf("label %s=%q, want %q", label, node.Labels[label], want)
		}
	}
	wantAddresses := []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: nic.Status.IPs[0].String()},
		{Type: corev1.NodeExternalIP, Address: nic.Status.VirtualIP.String()},
		{Type: corev1.NodeHostName, Address: "worker-1"},
	}
	if !slices.Equal(node.Status.Addresses, wantAddresses) {
		t.Errorf("addresses %v, want %v", node.Status.Addresses, wantAddresses)
	}

	// The CCM labels the Machine and its interface for this cluster, once.
	testenv.Await(t, ctx, waitTimeout, "the cluster label on the Machine and its interface", func(ctx context.Context) error {
		for _, obj := range []client.Object{machine, nic} {
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			if obj.GetLabels()[keys.LabelCluster] != stack.ClusterName {
				return fmt.Errorf("%s labels %v", obj.GetName(), obj.GetLabels())
			}
		}
		return nil
	})

	// Shut down: the kubelet stops reporting, the Machine is off, the Node gets the taint.
	stack.SetPower(t, machine, computev1alpha1.PowerOff)
	if _, err := stack.SetNodeReady(ctx, "worker-1", corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	waitForNode(t, "worker-1", "the shutdown taint", func(node *corev1.Node) error {
		if !hasTaint(node, shutdownTaint) {
			return errors.New("no shutdown taint")
		}
		return nil
	})

	// Deleted: the Node goes too.
	if err := stack.IronCore.Client.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	waitForNodeDeleted(t, "worker-1")
}

func waitForNodeDeleted(t *testing.T, name string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "Node "+name+" to be deleted", func(ctx context.Context) error {
		_, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
}

// TestNodesSurviveAnIronCoreOutage makes the IronCore API unreachable, then fail, for several
// node-monitor periods while Nodes are NotReady, and changes IronCore behind the CCM's back
// meanwhile: the Machine of one Node is deleted, and a Node registers for a Machine the CCM's
// cache cannot know, so that its InstanceExists must ask the failing API. The CCM must neither
// delete a Node nor crash during the outage; when IronCore is back, it must delete the Node of
// the deleted Machine, and only that one, and initialize the new Node.
func TestNodesSurviveAnIronCoreOutage(t *testing.T) {
	ctx := context.Background()
	ccm := startCCM(t, "ccm-outage")
	runningMachine(t, "worker-2", testenv.MachineOptions{})
	createNode(t, "worker-2", testenv.NodeOptions{})
	waitForNode(t, "worker-2", "the Node to be initialized", initialized)
	// NotReady makes the lifecycle controller ask IronCore about the Node every period (1s).
	if _, err := stack.SetNodeReady(ctx, "worker-2", corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	deleted := watchNodeDeletions(t)
	outage := &outageWatch{t: t, ccm: ccm, deleted: deleted, nodes: []string{"worker-2", "worker-3"}}

	// Unreachable first: that also ends the CCM's open watches, which keep streaming while the
	// proxy merely fails new requests, so the CCM's caches see nothing of the changes below.
	setOutageMode(t, apiproxy.Down)
	if err := stack.IronCore.Client.Delete(ctx, &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "worker-2"}}); err != nil {
		t.Fatal(err)
	}
	runningMachine(t, "worker-3", testenv.MachineOptions{})
	createNode(t, "worker-3", testenv.NodeOptions{})
	if _, err := stack.SetNodeReady(ctx, "worker-3", corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	failedChecks := func() int { return strings.Count(readLog(ccm), "error checking if node worker-3 exists") }
	before := failedChecks()
	outage.await("lifecycle checks of worker-3 to fail while IronCore is unreachable", func() error {
		if n := failedChecks() - before; n < 3 {
			return fmt.Errorf("%d failed checks", n)
		}
		return nil
	})
	outage.checkNodes(apiproxy.Down)

	// Failing: the caches relist against the API (a list, or a watch that lists, with client-go's
	// watch-list), and the lifecycle checks ask it, in vain.
	stack.IronCoreProxy.Reset()
	setOutageMode(t, apiproxy.Fail)
	outage.await("the CCM to relist Machines and ask about worker-3's Machine while IronCore fails", func() error {
		var lists, gets int
		for _, count := range stack.IronCoreProxy.Counts() {
			switch {
			case count.Resource != "machines.compute.ironcore.dev":
			case count.Verb == "list" || count.Verb == "watch":
				lists += count.N
			case count.Verb == "get":
				gets += count.N
			}
		}
		if lists < 1 || gets < 3 {
			return fmt.Errorf("%d lists and %d gets of Machines", lists, gets)
		}
		return nil
	})
	outage.checkNodes(apiproxy.Fail)

	// Back to normal, the CCM catches up: the Node of the deleted Machine goes, the new one
	// is initialized, and no other Node is deleted.
	if err := stack.IronCoreProxy.SetMode(apiproxy.Forward); err != nil {
		t.Fatal(err)
	}
	waitForNodeDeleted(t, "worker-2")
	waitForNode(t, "worker-3", "the new Node to be initialized", initialized)
	for drained := false; !drained; {
		select {
		case name := <-deleted:
			if name != "worker-2" {
				t.Errorf("Node %s was deleted after the outage", name)
			}
		default:
			drained = true
		}
	}
	if _, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "worker-3", metav1.GetOptions{}); err != nil {
		t.Fatalf("the new Node after the outage: %v", err)
	}
}

// setOutageMode switches the proxy between the CCM and IronCore, and back to Forward when
// the test ends, whatever happens.
func setOutageMode(t *testing.T, mode apiproxy.Mode) {
	t.Helper()
	if err := stack.IronCoreProxy.SetMode(mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCoreProxy.SetMode(apiproxy.Forward) })
}

// watchNodeDeletions reports the name of every Node deleted from now until the test ends.
func watchNodeDeletions(t *testing.T) <-chan string {
	t.Helper()
	deleted := make(chan string, 64)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	informer := factory.Core().V1().Nodes().Informer()
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			select {
			case deleted <- key:
			default: // the test reads only the first few
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(stop)
	if !toolscache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("the Node informer did not sync")
	}
	return deleted
}

// outageWatch checks, all through an IronCore outage, that the CCM keeps running and deletes
// none of the watched Nodes.
type outageWatch struct {
	t       *testing.T
	ccm     *testenv.Process
	deleted <-chan string
	nodes   []string
}

// await polls condition until it holds, failing the test at once if the CCM exits or deletes
// a watched Node meanwhile.
func (o *outageWatch) await(what string, condition func() error) {
	o.t.Helper()
	timeout := time.After(waitTimeout)
	poll := time.NewTicker(testenv.PollInterval)
	defer poll.Stop()
	for {
		select {
		case <-o.ccm.Exited():
			o.t.Fatalf("the CCM exited during the outage:\n%s", tail(readLog(o.ccm), 40))
		case name := <-o.deleted:
			if slices.Contains(o.nodes, name) {
				o.t.Fatalf("Node %s was deleted during the outage", name)
			}
		case <-timeout:
			o.t.Fatalf("waiting %s for %s: %v", waitTimeout, what, condition())
		case <-poll.C:
			if condition() == nil {
				return
			}
		}
	}
}

// checkNodes confirms that the watched Nodes still exist, in case a deletion's watch event is
// still on its way.
func (o *outageWatch) checkNodes(mode apiproxy.Mode) {
	o.t.Helper()
	for _, name := range o.nodes {
		if _, err := stack.TargetClientset.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			o.t.Fatalf("mode %d: Node %s during the outage: %v", mode, name, err)
		}
	}
}
