package provider_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestRoutesOfAnUninitializedNodeNamedByHostname routes a Node that has no provider ID yet
// and is named after its Machine's guest hostname, not the Machine: ListRoutes must find the
// Node of the route CreateRoute made, or the route controller deletes the route again.
func TestRoutesOfAnUninitializedNodeNamedByHostname(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	const machine, nodeName, cidr = "route-machine", "route-hostname", "10.244.31.0/24"
	// An uninitialized Node without a Machine, registered first, so that the Node informer has
	// it once it has the routed Node.
	const stray = "route-no-machine"
	if _, err := stack.CreateNode(ctx, stray, testenv.NodeOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), stray, metav1.DeleteOptions{})
	})
	createMachine(t, machine, testenv.MachineOptions{Hostname: nodeName})
	labelForCluster(t, machine)
	if _, err := stack.CreateNode(ctx, nodeName, testenv.NodeOptions{PodCIDRs: []string{cidr}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{})
	})
	var addresses []corev1.NodeAddress
	for _, ip := range networkInterface(t, machine).Status.IPs {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	if err := stack.SetNodeAddresses(ctx, nodeName, addresses); err != nil {
		t.Fatal(err)
	}
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Until the Node informer has the Node, CreateRoute cannot find it.
	testenv.Await(t, ctx, edgeTimeout, "the route to be created", func(ctx context.Context) error {
		return routes.CreateRoute(ctx, "kubernetes", "", route(node, cidr))
	})
	waitForListedRoutes(t, testenv.NetworkInterfaceName(machine), nodeName+" "+cidr)

	// Listing asks the cache only, even about a Node whose Machine the cache does not have.
	stack.IronCoreProxy.Reset()
	if _, err := routes.ListRoutes(ctx, "kubernetes"); err != nil {
		t.Fatal(err)
	}
	for _, count := range stack.IronCoreProxy.Counts() {
		if count.Verb == "get" || count.Verb == "list" {
			t.Errorf("ListRoutes made %d %s requests on %s", count.N, count.Verb, count.Resource)
		}
	}
}
