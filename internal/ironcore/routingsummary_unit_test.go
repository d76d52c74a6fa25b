package ironcore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/apimachinery/pkg/types"
)

// TestSummarizingTwiceKeepsTheSummary: client-go may hand the transform an object it has
// transformed before; a second summary must not replace the first with that of no destinations.
func TestSummarizingTwiceKeepsTheSummary(t *testing.T) {
	routing := &networkingv1alpha1.LoadBalancerRouting{
		NetworkRef: commonv1alpha1.LocalUIDReference{Name: "network", UID: "uid"},
		Destinations: []networkingv1alpha1.LoadBalancerDestination{
			{IP: commonv1alpha1.IP{Addr: netip.MustParseAddr("10.0.0.1")}},
			{IP: commonv1alpha1.IP{Addr: netip.MustParseAddr("10.0.0.2")}, TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{Name: "nic"}},
		},
	}
	digest := RoutingDigest(routing)
	summarize := summarizeRoutings()
	once, err := summarize(routing.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	twice, err := summarize(once)
	if err != nil {
		t.Fatal(err)
	}
	summary := twice.(*networkingv1alpha1.LoadBalancerRouting)
	if summary.Destinations != nil || RoutingDigest(summary) != digest || RoutingDestinationCount(summary) != 2 {
		t.Errorf("summarized twice: %d destinations kept, digest %s (want %s), count %d (want 2)", len(summary.Destinations), RoutingDigest(summary), digest, RoutingDestinationCount(summary))
	}
}

// TestTheDigestIsThatOfTheRoutingsText: the digest is written without a string per
// destination, and must stay the digest of the routing's text, "network/uid" then
// ";IP,UID,name,providerID" per destination, whatever the addresses and references.
func TestTheDigestIsThatOfTheRoutingsText(t *testing.T) {
	routing := &networkingv1alpha1.LoadBalancerRouting{
		NetworkRef: commonv1alpha1.LocalUIDReference{Name: "network", UID: "network-uid"},
		Destinations: []networkingv1alpha1.LoadBalancerDestination{
			{IP: commonv1alpha1.IP{Addr: netip.MustParseAddr("10.0.0.1")}},
			{IP: commonv1alpha1.IP{Addr: netip.MustParseAddr("2001:db8::1")}, TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{UID: "nic-uid", Name: "nic", ProviderID: "ironcore://ns/machine"}},
			{IP: commonv1alpha1.IP{}, TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{Name: "no-address"}},
		},
	}
	text := "network/network-uid;10.0.0.1;2001:db8::1,nic-uid,nic,ironcore://ns/machine;invalid IP,,no-address,"
	sum := sha256.Sum256([]byte(text))
	if got, want := RoutingDigest(routing), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("digest %s, want that of %q, %s", got, text, want)
	}
	if got, want := RoutingDigest(&networkingv1alpha1.LoadBalancerRouting{NetworkRef: routing.NetworkRef}), sha256.Sum256([]byte("network/network-uid")); got != hex.EncodeToString(want[:]) {
		t.Errorf("digest of a routing without destinations %s, want that of its network", got)
	}
}

// BenchmarkRoutingDigest digests a routing of 1,000 Nodes, as each routing event and write
// at that size does.
func BenchmarkRoutingDigest(b *testing.B) {
	routing := &networkingv1alpha1.LoadBalancerRouting{NetworkRef: commonv1alpha1.LocalUIDReference{Name: "network", UID: "network-uid"}}
	for i := range 1000 {
		routing.Destinations = append(routing.Destinations, networkingv1alpha1.LoadBalancerDestination{
			IP: commonv1alpha1.IP{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i % 256)})},
			TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{
				UID: types.UID(fmt.Sprintf("0c4f6c3e-8a5b-4f4e-9d7a-%012d", i)), Name: fmt.Sprintf("node-%04d-primary", i), ProviderID: fmt.Sprintf("ironcore://default/node-%04d", i),
			},
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		RoutingDigest(routing)
	}
}

// TestTheCacheNamesTheTargetsOfASmallRouting: the cache keeps the NetworkInterfaces of a
// routing with a few destinations (a new Service's first targets), in order, and says it cannot
// name those of a larger one; a routing that is not summarized names its own.
func TestTheCacheNamesTheTargetsOfASmallRouting(t *testing.T) {
	routing := func(n int) *networkingv1alpha1.LoadBalancerRouting {
		routing := &networkingv1alpha1.LoadBalancerRouting{}
		for i := range n {
			routing.Destinations = append(routing.Destinations, networkingv1alpha1.LoadBalancerDestination{
				IP:        commonv1alpha1.IP{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})},
				TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{Name: fmt.Sprintf("nic-%d", i)},
			})
		}
		return routing
	}
	summarize := summarizeRoutings()
	for _, n := range []int{0, 3, namedTargetsUpTo, namedTargetsUpTo + 1} {
		live := routing(n)
		want, _ := RoutingTargets(live)
		if len(want) != n {
			t.Fatalf("%d destinations: the routing itself names %v", n, want)
		}
		cached, err := summarize(live.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		got, ok := RoutingTargets(cached.(*networkingv1alpha1.LoadBalancerRouting))
		switch {
		case n <= namedTargetsUpTo && (!ok || !slices.Equal(got, want)):
			t.Errorf("%d destinations: the cache names %v (%t), want %v", n, got, ok, want)
		case n > namedTargetsUpTo && ok:
			t.Errorf("%d destinations: the cache names %v, want none", n, got)
		}
	}
}
