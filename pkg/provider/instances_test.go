package provider_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/simulator"
)

const waitTimeout = time.Minute

// node is the Node object the framework would pass for a Machine; it is not created in the
// target cluster, because InstancesV2 only reads the Node it is given.
func node(name, providerID string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
}

func providerIDOf(machine string) string {
	return "ironcore://" + stack.Namespace + "/" + machine
}

// createMachine creates a Machine and waits until the provider can describe it.
func createMachine(t *testing.T, name string, opts testenv.MachineOptions) *computev1alpha1.Machine {
	t.Helper()
	machine := stack.CreateMachineForTest(t, name, opts)
	waitForMetadata(t, node(name, providerIDOf(name)))
	return machine
}

func waitForMetadata(t *testing.T, n *corev1.Node) *cloudprovider.InstanceMetadata {
	t.Helper()
	var metadata *cloudprovider.InstanceMetadata
	testenv.Await(t, context.Background(), waitTimeout, "metadata of Node "+n.Name, func(ctx context.Context) error {
		var err error
		metadata, err = instancesV2(t).InstanceMetadata(ctx, n)
		return err
	})
	return metadata
}

func networkInterface(t *testing.T, machine string) *networkingv1alpha1.NetworkInterface {
	t.Helper()
	nic := &networkingv1alpha1.NetworkInterface{}
	key := client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}
	if err := stack.IronCore.Client.Get(context.Background(), key, nic); err != nil {
		t.Fatal(err)
	}
	return nic
}

func TestInstanceMetadataDescribesTheMachine(t *testing.T) {
	// The Node is named after the guest hostname, not after the Machine.
	machine := createMachine(t, "meta", testenv.MachineOptions{Pool: "pool-a", DualStack: true, VirtualIP: true, Hostname: "meta-host"})
	metadata := waitForMetadata(t, node("meta-host", ""))

	nic := networkInterface(t, machine.Name)
	want := &cloudprovider.InstanceMetadata{
		ProviderID:   "ironcore://" + stack.Namespace + "/meta",
		InstanceType: testenv.MachineClass,
		Zone:         "zone-a",
		Region:       "region-1",
		NodeAddresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: nic.Status.IPs[0].String()},
			{Type: corev1.NodeInternalIP, Address: nic.Status.IPs[1].String()},
			{Type: corev1.NodeExternalIP, Address: nic.Status.VirtualIP.String()},
			{Type: corev1.NodeHostName, Address: "meta-host"},
		},
		AdditionalLabels: map[string]string{keys.LabelMachinePool: "pool-a"},
	}
	if !equality.Semantic.DeepEqual(metadata, want) {
		t.Fatalf("metadata:\n got %+v\nwant %+v", metadata, want)
	}
	if !strings.Contains(want.NodeAddresses[1].Address, ":") {
		t.Fatalf("second InternalIP %s is not IPv6", want.NodeAddresses[1].Address)
	}
}

func TestInstanceMetadataZoneFallsBackToThePoolName(t *testing.T) {
	if err := stack.Simulator.AddMachinePool(context.Background(), "pool-unlabelled", simulator.Topology{}); err != nil {
		t.Fatal(err)
	}
	machine := createMachine(t, "zoneless", testenv.MachineOptions{Pool: "pool-unlabelled"})
	metadata := waitForMetadata(t, node("zoneless", ""))
	if metadata.Zone != "pool-unlabelled" || metadata.Region != "" {
		t.Fatalf("zone %q region %q, want the pool name and no region", metadata.Zone, metadata.Region)
	}
	if len(metadata.NodeAddresses) != 2 || metadata.NodeAddresses[1] != (corev1.NodeAddress{Type: corev1.NodeHostName, Address: machine.Name}) {
		t.Fatalf("addresses %v, want one InternalIP and the Machine name as Hostname", metadata.NodeAddresses)
	}
}

func TestInstanceMetadataWaitsForScheduling(t *testing.T) {
	ctx := context.Background()
	machine, err := stack.CreateMachine(ctx, "unscheduled", testenv.MachineOptions{Unschedulable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), machine) })
	n := node("unscheduled", "")
	testenv.Await(t, ctx, waitTimeout, "the Machine in the provider's cache", func(ctx context.Context) error {
		exists, err := instancesV2(t).InstanceExists(ctx, n)
		if err == nil && !exists {
			return errors.New("not yet")
		}
		return err
	})
	metadata, err := instancesV2(t).InstanceMetadata(ctx, n)
	if err == nil || !strings.Contains(err.Error(), "not scheduled") {
		t.Fatalf("InstanceMetadata = %+v, %v; want a not-scheduled error", metadata, err)
	}
}

func TestInstanceMetadataWaitsForAddresses(t *testing.T) {
	ctx := context.Background()
	// Hold the interface before it exists: its provider never reports it.
	nic := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName("addressless")}}
	stack.Simulator.Hold(nic)
	machine, err := stack.CreateMachine(ctx, "addressless", testenv.MachineOptions{Pool: "pool-b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), machine) })
	n := node("addressless", "")
	testenv.Await(t, ctx, waitTimeout, "the Machine to run", func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning {
			return fmt.Errorf("state %q", machine.Status.State)
		}
		return nil
	})
	testenv.Await(t, ctx, waitTimeout, "a no-IPs error", func(ctx context.Context) error {
		metadata, err := instancesV2(t).InstanceMetadata(ctx, n)
		if err != nil && strings.Contains(err.Error(), "has no IPs yet") {
			return nil
		}
		return fmt.Errorf("InstanceMetadata = %+v, %w", metadata, err)
	})
	stack.Simulator.Release(nic)
	if metadata := waitForMetadata(t, n); len(metadata.NodeAddresses) != 2 {
		t.Fatalf("addresses %v, want an InternalIP and the Hostname", metadata.NodeAddresses)
	}
}

func TestInstanceExistsIsFalseOnlyForAGoneMachine(t *testing.T) {
	ctx := context.Background()
	machine := createMachine(t, "doomed", testenv.MachineOptions{})
	byProviderID, byName := node("other-name", providerIDOf(machine.Name)), node(machine.Name, "")
	for _, n := range []*corev1.Node{byProviderID, byName} {
		if exists, err := instancesV2(t).InstanceExists(ctx, n); !exists || err != nil {
			t.Fatalf("InstanceExists(%s) = %v, %v; want true", n.Name, exists, err)
		}
	}
	if err := stack.IronCore.Client.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{byProviderID, byName} {
		testenv.Await(t, ctx, waitTimeout, "InstanceExists to report the Machine gone", func(ctx context.Context) error {
			exists, err := instancesV2(t).InstanceExists(ctx, n)
			if exists || err != nil {
				return fmt.Errorf("InstanceExists(%s) = %v, %w", n.Name, exists, err)
			}
			return nil
		})
	}
}

func TestInstanceExistsErrsWhileIronCoreFails(t *testing.T) {
	ctx := context.Background()
	machine := createMachine(t, "steady", testenv.MachineOptions{})
	// The cache must know the Machine before IronCore fails: that is what answers then.
	testenv.Await(t, ctx, waitTimeout, "Machine steady in the cache", func(ctx context.Context) error {
		_, err := cloud.IronCore().Machine(ctx, "steady")
		return err
	})
	for _, mode := range []apiproxy.Mode{apiproxy.Fail, apiproxy.Down} {
		setProxyMode(t, mode)
		// A Machine the cache knows is still there.
		if exists, err := instancesV2(t).InstanceExists(ctx, node("steady", providerIDOf(machine.Name))); !exists || err != nil {
			t.Errorf("mode %d: InstanceExists(existing) = %v, %v; want true", mode, exists, err)
		}
		// A Machine the cache does not know cannot be confirmed gone, so it is not reported gone.
		if exists, err := instancesV2(t).InstanceExists(ctx, node("unknown", providerIDOf("never-created"))); err == nil {
			t.Errorf("mode %d: InstanceExists(unknown) = %v, nil; want an error", mode, exists)
		}
		setProxyMode(t, apiproxy.Forward)
	}
	if exists, err := instancesV2(t).InstanceExists(ctx, node("unknown", providerIDOf("never-created"))); exists || err != nil {
		t.Errorf("InstanceExists(unknown) = %v, %v after recovery; want false", exists, err)
	}
}

func setProxyMode(t *testing.T, mode apiproxy.Mode) {
	t.Helper()
	if err := stack.IronCoreProxy.SetMode(mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCoreProxy.SetMode(apiproxy.Forward) })
}

func TestProviderIDsAreParsedStrictly(t *testing.T) {
	ctx := context.Background()
	createMachine(t, "strict", testenv.MachineOptions{})
	for _, providerID := range []string{
		"ironcore://another-tenant/strict",
		"aws:///eu-west-1a/i-0123",
		"ironcore://" + stack.Namespace + "/strict/extra",
	} {
		n := node("strict", providerID)
		if exists, err := instancesV2(t).InstanceExists(ctx, n); err == nil {
			t.Errorf("InstanceExists(%s) = %v, nil; want an error", providerID, exists)
		}
		if shutdown, err := instancesV2(t).InstanceShutdown(ctx, n); err == nil {
			t.Errorf("InstanceShutdown(%s) = %v, nil; want an error", providerID, shutdown)
		}
		if metadata, err := instancesV2(t).InstanceMetadata(ctx, n); err == nil {
			t.Errorf("InstanceMetadata(%s) = %+v, nil; want an error", providerID, metadata)
		}
	}
}

func TestInstanceShutdownFollowsTheMachineState(t *testing.T) {
	ctx := context.Background()
	c := stack.IronCore.Client
	machine := createMachine(t, "sleeper", testenv.MachineOptions{})
	n := node("sleeper", providerIDOf(machine.Name))
	waitForShutdown := func(want bool) {
		t.Helper()
		testenv.Await(t, ctx, waitTimeout, fmt.Sprintf("InstanceShutdown to be %v", want), func(ctx context.Context) error {
			shutdown, err := instancesV2(t).InstanceShutdown(ctx, n)
			if err != nil || shutdown != want {
				return fmt.Errorf("InstanceShutdown = %v, %w", shutdown, err)
			}
			return nil
		})
	}
	waitForShutdown(false)

	stack.SetPower(t, machine, computev1alpha1.PowerOff)
	waitForShutdown(true)
	stack.SetPower(t, machine, computev1alpha1.PowerOn)
	waitForShutdown(false)

	// A Machine being deleted is on its way out, whatever its state says.
	base := machine.DeepCopy()
	machine.Finalizers = append(machine.Finalizers, "example.org/hold")
	if err := c.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	waitForShutdown(true)
	if exists, err := instancesV2(t).InstanceExists(ctx, n); !exists || err != nil {
		t.Fatalf("InstanceExists of a Machine being deleted = %v, %v; want true", exists, err)
	}
	base = machine.DeepCopy()
	machine.Finalizers = nil
	if err := c.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func TestReadMethodsNeverWrite(t *testing.T) {
	ctx := context.Background()
	createMachine(t, "reader", testenv.MachineOptions{VirtualIP: true})
	// A Machine that has just appeared may not be in the cache yet, and is then confirmed live.
	testenv.Await(t, ctx, waitTimeout, "Machine reader in the cache", func(ctx context.Context) error {
		_, err := cloud.IronCore().Machine(ctx, "reader")
		return err
	})
	stack.IronCoreProxy.Reset()
	for _, n := range []*corev1.Node{node("reader", ""), node("reader", providerIDOf("reader")), node("gone", providerIDOf("gone"))} {
		_, _ = instancesV2(t).InstanceExists(ctx, n)
		_, _ = instancesV2(t).InstanceShutdown(ctx, n)
		_, _ = instancesV2(t).InstanceMetadata(ctx, n)
	}
	var reads int
	for _, count := range stack.IronCoreProxy.Counts() {
		switch count.Verb {
		case "watch":
			// The caches' own streams, renewed now and then by any running provider; no call
			// makes one.
		case "get", "list":
			reads += count.N
		default:
			t.Errorf("%d %s requests on %s", count.N, count.Verb, count.Resource)
		}
	}
	// Only the confirmation that "gone" is gone needs the API server; the rest is cached.
	if reads > 3 {
		t.Errorf("%d reads, want at most 3: %v", reads, stack.IronCoreProxy.Counts())
	}
}
