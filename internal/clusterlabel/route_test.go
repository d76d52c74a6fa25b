package clusterlabel

import (
	"net/netip"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func TestLeftToRoute(t *testing.T) {
	now := time.Now()
	node := func(age time.Duration, podCIDRs ...string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:       corev1.NodeSpec{PodCIDRs: podCIDRs},
		}
	}
	nic := func(network string, labelled bool, prefixes ...string) *networkingv1alpha1.NetworkInterface {
		n := &networkingv1alpha1.NetworkInterface{Spec: networkingv1alpha1.NetworkInterfaceSpec{
			NetworkRef: corev1.LocalObjectReference{Name: network},
		}}
		if labelled {
			n.Labels = map[string]string{keys.LabelCluster: "lab"}
		}
		for _, p := range prefixes {
			n.Spec.Prefixes = append(n.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: netip.MustParsePrefix(p)}})
		}
		n.Spec.Prefixes = append(n.Spec.Prefixes, networkingv1alpha1.PrefixSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{}})
		return n
	}
	const v4, v6 = "10.244.1.0/24", "fd00:244:1::/64"
	allocating := nic("net", false)
	allocating.Spec.Prefixes = append(allocating.Spec.Prefixes, networkingv1alpha1.PrefixSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
		PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{keys.LabelCluster: "lab", keys.LabelPodCIDR: "IPv4"}}},
	}})
	for _, tc := range []struct {
		name    string
		network string
		node    *corev1.Node
		nic     *networkingv1alpha1.NetworkInterface
		want    time.Duration
	}{
		{"a young Node's interface without its pod CIDR waits for the route", "net", node(10*time.Second, v4), nic("net", false), 20 * time.Second},
		{"until the Node is old enough", "net", node(routeLabelWait, v4), nic("net", false), 0},
		{"one of two pod CIDRs routed is not all", "net", node(0, v4, v6), nic("net", false, v4), routeLabelWait},
		{"an interface with every pod CIDR is labelled now", "net", node(0, v4, v6), nic("net", false, v6, v4), 0},
		{"nor is one that is labelled already", "net", node(0, v4), nic("net", true), 0},
		{"nor one on another Network", "net", node(0, v4), nic("other", false), 0},
		{"nor one of a Node without pod CIDRs", "net", node(0), nic("net", false), 0},
		{"nor one whose pod CIDRs IronCore allocates, routed without a write", "net", node(0, v4), allocating, 0},
		{"nor any where this CCM routes nothing", "", node(0, v4), nic("net", false), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{routeWait: ironcore.RouteWait{Network: tc.network, Cluster: "lab", For: routeLabelWait}}
			if got := c.leftToRoute(tc.node, tc.nic, now); got != tc.want {
				t.Errorf("left %v, want %v", got, tc.want)
			}
		})
	}
}
