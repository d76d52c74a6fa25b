package ironcore_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestCachedRoutingsKeepASummaryOfTheirDestinations: the cache holds no destinations of a
// LoadBalancerRouting (one per target, most of what a routing weighs), yet tells their number
// and a digest that matches the API server's routing, and follows a change of them.
func TestCachedRoutingsKeepASummaryOfTheirDestinations(t *testing.T) {
	ctx, c := stack.StartIronCoreClientForTest(t, nil)
	routing := &networkingv1alpha1.LoadBalancerRouting{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "summarized"},
		NetworkRef: commonv1alpha1.LocalUIDReference{Name: stack.Network, UID: "network-uid"},
	}
	for i := range 3 {
		routing.Destinations = append(routing.Destinations, networkingv1alpha1.LoadBalancerDestination{
			IP:        commonv1alpha1.IP{Addr: netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1))},
			TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{UID: "nic-uid", Name: fmt.Sprintf("nic-%d", i), ProviderID: "provider"},
		})
	}
	if err := stack.IronCore.Client.Create(ctx, routing); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), routing) })

	expectSummary := func(resourceVersion string) {
		t.Helper()
		var cached *networkingv1alpha1.LoadBalancerRouting
		testenv.Await(t, ctx, time.Minute, "the cache to show the routing", func(ctx context.Context) error {
			var err error
			cached, err = c.ReadOnlyLoadBalancerRouting(ctx, routing.Name)
			if err == nil && cached.ResourceVersion != resourceVersion {
				return fmt.Errorf("resource version %s, want %s", cached.ResourceVersion, resourceVersion)
			}
			return err
		})
		live, err := c.LiveLoadBalancerRouting(ctx, routing.Name)
		if err != nil {
			t.Fatal(err)
		}
		if cached.Destinations != nil {
			t.Errorf("the cache holds %d destinations", len(cached.Destinations))
		}
		if got, want := ironcore.RoutingDestinationCount(cached), len(live.Destinations); got != want {
			t.Errorf("cached routing counts %d destinations, want %d", got, want)
		}
		if got, want := ironcore.RoutingDigest(cached), ironcore.RoutingDigest(live); got != want {
			t.Errorf("cached routing's digest %s, the API server's %s", got, want)
		}
	}
	expectSummary(routing.ResourceVersion)

	base := routing.DeepCopy()
	routing.Destinations = routing.Destinations[:2]
	routing.Destinations[1].IP = commonv1alpha1.IP{Addr: netip.MustParseAddr("10.0.0.9")}
	if err := stack.IronCore.Client.Patch(ctx, routing, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if ironcore.RoutingDigest(routing) == ironcore.RoutingDigest(base) {
		t.Fatal("two routings with other destinations have one digest")
	}
	expectSummary(routing.ResourceVersion)
}
