package provider_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/podcidrs"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// ipamCloud starts a provider of the test's own, wired to a Node informer as the framework
// wires it (explicit routings, as routesOf), and an allocator of IPv4 pod CIDRs of the given
// size from the parent Prefix, built on it as cmd builds it; it returns the provider, the
// allocator and the informer's lister.
func ipamCloud(t *testing.T, parent string) (*provider.Cloud, *podcidrs.Allocator, corelisters.NodeLister) {
	t.Helper()
	options := testOptions()
	options.UseNICSelector = false
	c := startCloudWithConfigAndOptions(t, "podCIDRParentPrefix: "+parent+"\npodCIDRMaskSize: 24\n", options)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	c.SetInformers(factory)
	lister := factory.Core().V1().Nodes().Lister()
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return c, podcidrs.ForProvider(c, provider.NotReady), lister
}

// ipamNode creates a Node with the InternalIPs of the Machine's NetworkInterface: initialized
// (its provider ID names the Machine) if providerID is set, otherwise found by its name.
func ipamNode(t *testing.T, name, machine, providerID string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	if _, err := stack.CreateNode(ctx, name, testenv.NodeOptions{ProviderID: providerID}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	var addresses []corev1.NodeAddress
	for _, ip := range networkInterface(t, machine).Status.IPs {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	if err := stack.SetNodeAddresses(ctx, name, addresses); err != nil {
		t.Fatal(err)
	}
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// allocateAndSet moves the Node's allocation forward until IronCore has allocated its pod CIDRs,
// sets them on the Node as the node IPAM controller does, and waits for the provider's Node
// cache to show them.
func allocateAndSet(t *testing.T, allocator *podcidrs.Allocator, nodes corelisters.NodeLister, node *corev1.Node) []string {
	t.Helper()
	ctx := context.Background()
	var cidrs []string
	testenv.Await(t, ctx, waitTimeout, "pod CIDRs for Node "+node.Name, func(ctx context.Context) error {
		allocation, err := allocator.AllocatePodCIDRs(ctx, node)
		if err != nil {
			return err
		}
		if allocation.CIDRs == nil {
			return errors.New("pending")
		}
		cidrs = allocation.CIDRs
		return nil
	})
	node.Spec.PodCIDR, node.Spec.PodCIDRs = cidrs[0], cidrs
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCachedNode(t, nodes, node.Name, func(node *corev1.Node) bool { return slices.Equal(node.Spec.PodCIDRs, cidrs) })
	return cidrs
}

func waitForCachedNode(t *testing.T, nodes corelisters.NodeLister, name string, ok func(*corev1.Node) bool) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "the provider's cache to show Node "+name, func(context.Context) error {
		node, err := nodes.Get(name)
		if err != nil {
			return err
		}
		if !ok(node) {
			return errors.New("not as expected yet")
		}
		return nil
	})
}

// TestASecondNodeOnAMachineGetsNoPodCIDRs: a NetworkInterface's pod CIDR entries are one Node's.
// A second Node on the same Machine (both provider IDs name it) would be given the first one's
// ranges; it is refused, both while the first waits for its allocation (it came second) and
// once the first has its pod CIDRs.
func TestASecondNodeOnAMachineGetsNoPodCIDRs(t *testing.T) {
	ctx := context.Background()
	parent, err := stack.CreateRootPrefix(ctx, "twice-pods", "10.223.0.0/16", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), parent) })
	_, allocator, nodes := ipamCloud(t, parent.Name)
	createMachine(t, "pc-twice", testenv.MachineOptions{})
	first := ipamNode(t, "pc-twice", "pc-twice", providerIDOf("pc-twice"))
	second := ipamNode(t, "pc-twice-again", "pc-twice", providerIDOf("pc-twice"))
	waitForCachedNode(t, nodes, second.Name, func(*corev1.Node) bool { return true })

	if allocation, err := allocator.AllocatePodCIDRs(ctx, second); !errors.Is(err, nodeipam.ErrMachineShared) {
		t.Fatalf("the second Node on the Machine, before the first has pod CIDRs: %+v, %v; want it refused (%v)", allocation, err, nodeipam.ErrMachineShared)
	}
	cidrs := allocateAndSet(t, allocator, nodes, first)
	allocation, err := allocator.AllocatePodCIDRs(ctx, second)
	if !errors.Is(err, nodeipam.ErrMachineShared) {
		t.Fatalf("the second Node on the Machine got %+v (%v); the first has %v", allocation, err, cidrs)
	}
}

// TestAnAmbiguousHostnameKeepsItsPodCIDRs: an uninitialized Node is found by its name as a
// Machine's guest hostname. Once a second Machine has the same hostname, which Machine it runs
// on cannot be told; its pod CIDRs, immutable on the Node, must not be released as unused.
func TestAnAmbiguousHostnameKeepsItsPodCIDRs(t *testing.T) {
	ctx := context.Background()
	parent, err := stack.CreateRootPrefix(ctx, "ambiguous-pods", "10.224.0.0/16", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), parent) })
	c, allocator, nodes := ipamCloud(t, parent.Name)
	const hostname = "pc-ambiguous"
	createMachine(t, "pc-host-a", testenv.MachineOptions{Hostname: hostname})
	node := ipamNode(t, hostname, "pc-host-a", "")
	waitForCachedNode(t, nodes, node.Name, func(*corev1.Node) bool { return true })
	cidrs := allocateAndSet(t, allocator, nodes, node)
	nicName := testenv.NetworkInterfaceName("pc-host-a")
	releasedFrom := func(released []nodeipam.Released) bool {
		return slices.ContainsFunc(released, func(r nodeipam.Released) bool { return r.NetworkInterface == nicName })
	}
	if released, err := allocator.ReleaseUnusedPodCIDRs(ctx); err != nil || releasedFrom(released) {
		t.Fatalf("released %+v (%v) while the Node's hostname named one Machine", released, err)
	}

	createMachine(t, "pc-host-b", testenv.MachineOptions{Hostname: hostname})
	testenv.Await(t, ctx, waitTimeout, "the provider's cache to show both Machines with hostname "+hostname, func(ctx context.Context) error {
		if _, err := c.IronCore().MachineByHostname(ctx, hostname); !errors.Is(err, ironcore.ErrAmbiguousHostname) {
			return errors.New("not ambiguous yet")
		}
		return nil
	})
	released, err := allocator.ReleaseUnusedPodCIDRs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if releasedFrom(released) {
		t.Fatalf("released %+v while Node %s, whose hostname two Machines now share, holds %v", released, hostname, cidrs)
	}
	if _, ephemeral := specPrefixes(t, "pc-host-a"); ephemeral != 1 {
		t.Fatalf("NetworkInterface of pc-host-a has %d pod CIDR entries, want the Node's one", ephemeral)
	}
	// Its route stays listed with its Node: listed without one, it would be deleted.
	routes, _ := c.Routes()
	list, err := routes.ListRoutes(ctx, "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(r *cloudprovider.Route) bool {
		return r.DestinationCIDR == cidrs[0] && string(r.TargetNode) == hostname
	}) {
		t.Fatalf("routes %v: none to %s for Node %s", describeRoutes(list), cidrs[0], hostname)
	}
}

func describeRoutes(routes []*cloudprovider.Route) []string {
	var described []string
	for _, r := range routes {
		described = append(described, r.DestinationCIDR+"->"+string(r.TargetNode))
	}
	return described
}
