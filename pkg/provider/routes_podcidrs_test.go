package provider_test

import (
	"context"
	"errors"
	"testing"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestRoutesOfPodCIDRsAllocatedByIronCore gives a NetworkInterface a pod CIDR entry as the node
// IPAM controller writes it, lets IronCore allocate it, and checks the three route operations
// on it: ListRoutes reports it once the Node has it (not before, or the route controller would
// ask to delete it), CreateRoute finds it present and adds no literal copy, and DeleteRoute
// leaves it to IronCore.
func TestRoutesOfPodCIDRsAllocatedByIronCore(t *testing.T) {
	ctx := context.Background()
	const name = "route-ipam"
	parent, err := stack.CreateRootPrefix(ctx, "route-ipam-pods", "10.220.0.0/16", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), parent) })
	createMachine(t, name, testenv.MachineOptions{DualStack: true})
	nic := networkInterface(t, name)
	prefix, err := stack.AllocatePodCIDR(ctx, nic.Name, parent.Name, corev1.IPv4Protocol, 24)
	if err != nil {
		t.Fatal(err)
	}
	cidr := prefix.Spec.Prefix.String()

	var addresses []corev1.NodeAddress
	for _, ip := range nic.Status.IPs {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	node := routeNodeWithAddresses(t, name, addresses)
	testenv.Await(t, ctx, waitTimeout, "the provider's cache to show the allocation", func(ctx context.Context) error {
		cached, err := cloud.IronCore().PodCIDRPrefix(ctx, prefix.Name)
		if err != nil {
			return err
		}
		if cached.Spec.Prefix == nil || cached.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated {
			return errors.New("not allocated yet")
		}
		return nil
	})
	// A literal route to the Node, listed with its target, shows that the provider sees both
	// the NetworkInterface and the Node. The allocated CIDR, not the Node's yet, is not listed
	// beside it (the route controller would ask to delete it), and CreateRoute adds no copy.
	const literalRoute = "10.221.0.0/24"
	routes := routesOf(t)
	if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, literalRoute)); err != nil {
		t.Fatal(err)
	}
	waitForListedRoutes(t, nic.Name, name+" "+literalRoute)
	if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, cidr)); err != nil {
		t.Fatal(err)
	}
	if literal, _ := specPrefixes(t, name); len(literal) != 1 || literal[0] != literalRoute {
		t.Fatalf("literal prefixes %v, want only the literal route: CreateRoute added the pod CIDR IronCore allocated as a copy", literal)
	}

	node.Spec.PodCIDR, node.Spec.PodCIDRs = cidr, []string{cidr}
	if node, err = stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForListedRoutes(t, nic.Name, name+" "+cidr, name+" "+literalRoute)
	if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, cidr)); err != nil {
		t.Fatal(err)
	}
	if literal, ephemeral := specPrefixes(t, name); len(literal) != 1 || ephemeral != 1 {
		t.Fatalf("after CreateRoute: literal prefixes %v and %d ephemeral, want only the literal route and 1", literal, ephemeral)
	}
	deleted := route(node, cidr)
	deleted.Name = nic.Name + "/" + cidr
	if err := routes.DeleteRoute(ctx, "kubernetes", deleted); err != nil {
		t.Fatal(err)
	}
	if _, ephemeral := specPrefixes(t, name); ephemeral != 1 {
		t.Fatalf("DeleteRoute removed the entry IronCore allocated the pod CIDR for")
	}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(prefix), prefix); err != nil || !prefix.DeletionTimestamp.IsZero() {
		t.Fatalf("the pod CIDR's Prefix after DeleteRoute: %v, deleting %v", err, prefix.DeletionTimestamp)
	}
}
