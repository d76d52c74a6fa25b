package inspect_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/inspect"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestInspectShowsPodCIDRsFromIronCore gives a Node a pod CIDR that IronCore allocated as an
// ephemeral prefix of its NetworkInterface: it is routed without a literal prefix, and inspect
// must say so rather than report the route missing.
func TestInspectShowsPodCIDRsFromIronCore(t *testing.T) {
	ctx := context.Background()
	const name = "insp-ipam"
	parent := stack.CreateRootPrefixForTest(t, "insp-pods", "10.250.0.0/16", nil)
	if _, err := stack.CreateMachine(ctx, name, testenv.MachineOptions{Pool: "pool-a"}); err != nil {
		t.Fatal(err)
	}
	nic := waitForNetworkInterface(t, name)
	prefix, err := stack.AllocatePodCIDR(ctx, nic.Name, parent.Name, corev1.IPv4Protocol, 24)
	if err != nil {
		t.Fatal(err)
	}
	cidr := prefix.Spec.Prefix.String()
	createNode(t, name, "ironcore://"+stack.Namespace+"/"+name, []string{cidr}, "zone-a",
		[]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nic.Status.IPs[0].String()}})

	report, err := inspect.Run(ctx, options())
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, route := range report.Routes {
		if route.Node != name {
			continue
		}
		found = true
		if route.CIDR != cidr || route.State != inspect.RoutePresent || !strings.Contains(route.Detail, "IronCore's IPAM") {
			t.Errorf("route %+v, want %s present, allocated by IronCore's IPAM", route, cidr)
		}
	}
	if !found {
		t.Errorf("no route of %s reported", name)
	}
}
