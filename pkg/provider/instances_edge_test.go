package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/simulator"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// edgeTimeout bounds waits for what should come at once, so that a regression fails soon.
const edgeTimeout = 30 * time.Second

// TestInstanceMetadataWaitsOnlyForTheClusterNetwork gives a Machine a second
// NetworkInterface, on another Network, that does not exist yet and then has no IPs yet: the
// Node is described all the same, from its interface on the cluster Network, and the other
// interface's address is added once it has one.
func TestInstanceMetadataWaitsOnlyForTheClusterNetwork(t *testing.T) {
	ctx := context.Background()
	c := stack.IronCore.Client
	other := &networkingv1alpha1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "storage-network"}}
	if err := c.Create(ctx, other); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const name, otherNIC = "multi-nic", "multi-nic-storage"
	machine := &computev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name},
		Spec: computev1alpha1.MachineSpec{
			MachineClassRef: corev1.LocalObjectReference{Name: testenv.MachineClass},
			MachinePoolRef:  &corev1.LocalObjectReference{Name: "pool-a"},
			NetworkInterfaces: []computev1alpha1.NetworkInterface{{
				Name: testenv.PrimaryNIC,
				NetworkInterfaceSource: computev1alpha1.NetworkInterfaceSource{Ephemeral: &computev1alpha1.EphemeralNetworkInterfaceSource{
					NetworkInterfaceTemplate: &networkingv1alpha1.NetworkInterfaceTemplateSpec{Spec: networkingv1alpha1.NetworkInterfaceSpec{
						NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
						IPs: []networkingv1alpha1.IPSource{{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
							PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{Spec: ipamv1alpha1.PrefixSpec{
								IPFamily:  corev1.IPv4Protocol,
								ParentRef: &corev1.LocalObjectReference{Name: testenv.NodePrefixV4},
							}},
						}}},
					}},
				}},
			}, {
				Name:                   "storage",
				NetworkInterfaceSource: computev1alpha1.NetworkInterfaceSource{NetworkInterfaceRef: &corev1.LocalObjectReference{Name: otherNIC}},
			}},
		},
	}
	if err := c.Create(ctx, machine); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), machine) })
	n := node(name, providerIDOf(name))
	wantAddresses := func(extra ...corev1.NodeAddress) []corev1.NodeAddress {
		addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: networkInterface(t, name).Status.IPs[0].String()}}
		return append(append(addresses, extra...), corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	}
	waitForAddresses := func(what string, want func() []corev1.NodeAddress) {
		t.Helper()
		testenv.Await(t, ctx, edgeTimeout, what, func(ctx context.Context) error {
			metadata, err := instancesV2(t).InstanceMetadata(ctx, n)
			if err != nil {
				return err
			}
			if want := want(); !slices.Equal(metadata.NodeAddresses, want) {
				return fmt.Errorf("addresses %v, want %v", metadata.NodeAddresses, want)
			}
			return nil
		})
	}

	// The other interface does not exist yet.
	waitForAddresses("metadata without the missing interface", func() []corev1.NodeAddress { return wantAddresses() })

	// It exists, claimed by the Machine, but its provider has not given it its IP yet.
	nic := &networkingv1alpha1.NetworkInterface{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: otherNIC},
		Spec: networkingv1alpha1.NetworkInterfaceSpec{
			NetworkRef: corev1.LocalObjectReference{Name: other.Name},
			MachineRef: &commonv1alpha1.LocalUIDReference{Name: machine.Name, UID: machine.UID},
			IPs:        []networkingv1alpha1.IPSource{{Value: &commonv1alpha1.IP{Addr: netip.MustParseAddr("192.168.50.7")}}},
		},
	}
	stack.Simulator.Hold(nic)
	t.Cleanup(func() { stack.Simulator.Release(nic) })
	if err := c.Create(ctx, nic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), nic) })
	testenv.Await(t, ctx, edgeTimeout, "the provider's cache to show the other interface", func(ctx context.Context) error {
		_, err := cloud.IronCore().NetworkInterface(ctx, otherNIC)
		return err
	})
	waitForAddresses("metadata without the addressless interface", func() []corev1.NodeAddress { return wantAddresses() })

	// Its IP comes: it is listed after the cluster Network's.
	stack.Simulator.Release(nic)
	waitForAddresses("metadata with the other interface's address", func() []corev1.NodeAddress {
		return wantAddresses(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.50.7"})
	})
}

// TestALongMachinePoolNameDoesNotHoldTheNodeBack runs a Machine on a MachinePool whose name is
// too long for a label value: the Node is described without the pool label, and gets a
// Warning event saying why.
func TestALongMachinePoolNameDoesNotHoldTheNodeBack(t *testing.T) {
	ctx := context.Background()
	pool := "pool-" + strings.Repeat("long", 16)
	if err := stack.Simulator.AddMachinePool(ctx, pool, simulator.Topology{Zone: "zone-c", Region: "region-1"}); err != nil {
		t.Fatal(err)
	}
	createMachine(t, "long-pool", testenv.MachineOptions{Pool: pool})
	n := node("long-pool-node", providerIDOf("long-pool"))
	var metadata *cloudprovider.InstanceMetadata
	testenv.Await(t, ctx, edgeTimeout, "metadata from the long-named pool", func(ctx context.Context) error {
		var err error
		metadata, err = instancesV2(t).InstanceMetadata(ctx, n)
		if err == nil && metadata.Zone != "zone-c" {
			return fmt.Errorf("zone %q: the MachinePool's labels are not in the cache yet", metadata.Zone)
		}
		return err
	})
	if _, ok := metadata.AdditionalLabels[keys.LabelMachinePool]; ok {
		t.Errorf("additional labels %v carry the pool name, which is not a valid label value", metadata.AdditionalLabels)
	}
	selector := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": n.Name, "reason": provider.ReasonMachinePoolLabelSkipped}.AsSelector().String()
	testenv.Await(t, ctx, edgeTimeout, "the Warning event on the Node", func(ctx context.Context) error {
		events, err := stack.TargetClientset.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return err
		}
		for _, event := range events.Items {
			if event.Type == corev1.EventTypeWarning && strings.Contains(event.Message, pool) {
				return nil
			}
		}
		return errors.New("no such event")
	})
}
