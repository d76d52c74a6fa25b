package ironcore

import (
	"net/netip"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
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
