package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/inspect"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestInspectShowsPodCIDRsFromIronCore gives a Node a pod CIDR that IronCore allocated as an
// ephemeral prefix of its NetworkInterface: it is routed without a literal prefix, and inspect
// must say so rather than report the route missing.
func TestInspectShowsPodCIDRsFromIronCore(t *testing.T) {
	ctx := context.Background()
	const name = "insp-ipam"
	parent, err := stack.CreateRootPrefix(ctx, "insp-pods", "10.250.0.0/16", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), parent) })
	if _, err := stack.CreateMachine(ctx, name, testenv.MachineOptions{Pool: "pool-a"}); err != nil {
		t.Fatal(err)
	}
	nic := waitForNetworkInterface(t, name)
	base := nic.DeepCopy()
	nic.Labels = map[string]string{keys.LabelCluster: stack.ClusterName}
	nic.Spec.Prefixes = []networkingv1alpha1.PrefixSource{{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
		PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.LabelCluster: stack.ClusterName, keys.LabelPodCIDR: string(corev1.IPv4Protocol)}},
			Spec:       ipamv1alpha1.PrefixSpec{IPFamily: corev1.IPv4Protocol, PrefixLength: 24, ParentRef: &corev1.LocalObjectReference{Name: parent.Name}},
		},
	}}}
	if err := stack.IronCore.Client.Patch(ctx, nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	prefix := &ipamv1alpha1.Prefix{}
	waitFor(t, "IronCore to allocate the pod CIDR", func(ctx context.Context) error {
		key := client.ObjectKey{Namespace: stack.Namespace, Name: networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nic.Name, 0)}
		if err := stack.IronCore.Client.Get(ctx, key, prefix); err != nil {
			return err
		}
		if prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated || prefix.Spec.Prefix == nil {
			return errors.New("not allocated yet")
		}
		return nil
	})
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
