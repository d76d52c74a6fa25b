package e2e

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

const (
	waitTimeout = time.Minute
	// shutdownTaint is what the node lifecycle controller puts on a Node whose Machine is off.
	shutdownTaint = "node.cloudprovider.kubernetes.io/shutdown"
)

// runningMachine creates a Machine and waits until IronCore reports it running with addresses.
func runningMachine(t *testing.T, name string, opts testenv.MachineOptions) *computev1alpha1.Machine {
	t.Helper()
	ctx := context.Background()
	machine, err := stack.CreateMachine(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(stack.IronCore.Client.Delete(context.Background(), machine)) })
	nicKey := client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(name)}
	err = testenv.WaitFor(ctx, waitTimeout, "Machine "+name+" running with addresses", func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
			return err
		}
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := stack.IronCore.Client.Get(ctx, nicKey, nic); err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning || len(nic.Status.IPs) == 0 {
			return fmt.Errorf("machine %q, interface IPs %v", machine.Status.State, nic.Status.IPs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return machine
}

func createNode(t *testing.T, name string, opts testenv.NodeOptions) *corev1.Node {
	t.Helper()
	node, err := stack.CreateNode(context.Background(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return node
}

// waitForNode polls the Node until check accepts it.
func waitForNode(t *testing.T, name, what string, check func(*corev1.Node) error) *corev1.Node {
	t.Helper()
	var node *corev1.Node
	err := testenv.WaitFor(context.Background(), waitTimeout, what, func(ctx context.Context) error {
		var err error
		node, err = stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return check(node)
	})
	if err != nil {
		t.Fatal(err)
	}
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
	err := testenv.WaitFor(ctx, waitTimeout, "the cluster label on the Machine and its interface", func(ctx context.Context) error {
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
	if err != nil {
		t.Fatal(err)
	}

	// Shut down: the kubelet stops reporting, the Machine is off, the Node gets the taint.
	setPower(t, machine, computev1alpha1.PowerOff)
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
	err := testenv.WaitFor(context.Background(), waitTimeout, "Node "+name+" to be deleted", func(ctx context.Context) error {
		_, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func setPower(t *testing.T, machine *computev1alpha1.Machine, power computev1alpha1.Power) {
	t.Helper()
	ctx := context.Background()
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
		t.Fatal(err)
	}
	base := machine.DeepCopy()
	machine.Spec.Power = power
	if err := stack.IronCore.Client.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// TestNodesSurviveAnIronCoreOutage makes the IronCore API fail, then become unreachable, for
// several node-monitor periods while a Node is NotReady: the CCM must neither delete the Node
// nor crash, and must resume when IronCore is back.
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
	for _, mode := range []apiproxy.Mode{apiproxy.Fail, apiproxy.Down} {
		if err := stack.IronCoreProxy.SetMode(mode); err != nil {
			t.Fatal(err)
		}
		// Let the CCM's caches lose their watches and relist against the failing API, and
		// several lifecycle checks run, before looking.
		outage := time.After(8 * time.Second)
		for waiting := true; waiting; {
			select {
			case <-outage:
				waiting = false
			case <-ccm.Exited():
				t.Fatalf("the CCM exited during the outage:\n%s", tail(readLog(ccm), 40))
			}
		}
		if _, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "worker-2", metav1.GetOptions{}); err != nil {
			t.Fatalf("mode %d: Node after the outage: %v", mode, err)
		}
		if err := stack.IronCoreProxy.SetMode(apiproxy.Forward); err != nil {
			t.Fatal(err)
		}
	}
	// Back to normal, the CCM still works: deleting the Machine deletes the Node.
	if err := stack.IronCore.Client.Delete(ctx, &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "worker-2"}}); err != nil {
		t.Fatal(err)
	}
	waitForNodeDeleted(t, "worker-2")
}
