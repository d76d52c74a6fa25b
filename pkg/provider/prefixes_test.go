package provider_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// TestAnInternalServiceTakesItsAddressFromItsOwnPrefix: an Internal Service naming a Prefix
// gets its address from it, not from the cloud-config's; one naming a Prefix that does not
// exist, or one of the other family, gets an event and no LoadBalancer; an existing
// LoadBalancer keeps its address when the annotation changes, with an event; a Public
// Service's Prefix annotation is ignored with an event.
func TestAnInternalServiceTakesItsAddressFromItsOwnPrefix(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "own-prefix-1")
	if _, err := stack.CreateRootPrefix(ctx, "team-a-lbs", "10.77.0.0/24", map[string]string{keys.LabelLoadBalancerPool: "true"}); err != nil {
		t.Fatal(err)
	}
	internal := func(prefix string) testenv.ServiceOptions {
		return testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerPrefix: prefix}}
	}

	service := createService(t, "own-prefix", internal("team-a-lbs"))
	ips := ingressIPs(ensureUntilReady(t, lbs, service, nodes))
	if len(ips) != 1 || !netip.MustParsePrefix("10.77.0.0/24").Contains(netip.MustParseAddr(ips[0])) {
		t.Fatalf("ingress %v, want one address from Prefix team-a-lbs (10.77.0.0/24)", ips)
	}

	// The annotation changes: the LoadBalancer keeps its address, and says so.
	service.Annotations[keys.AnnotationLoadBalancerPrefix] = testenv.LoadBalancerPrefix
	if got := ingressIPs(ensureUntilReady(t, lbs, service, nodes)); len(got) != 1 || got[0] != ips[0] {
		t.Errorf("ingress %v after the annotation changed, want the address kept (%s)", got, ips[0])
	}
	if message := waitForEvent(t, service, provider.ReasonLoadBalancerIPKept); !strings.Contains(message, "team-a-lbs") {
		t.Errorf("event %q does not name the Prefix the address came from", message)
	}

	for _, tc := range []struct{ name, prefix string }{
		{"own-prefix-missing", "no-such-prefix"},
		{"own-prefix-family", testenv.LoadBalancerPrefixV6},
	} {
		refused := createService(t, tc.name, internal(tc.prefix))
		_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", refused, nodes)
		if !errorContains(err, tc.prefix) {
			t.Errorf("%s: EnsureLoadBalancer error %v, want one naming %s", tc.name, err, tc.prefix)
		}
		if message := waitForEvent(t, refused, provider.ReasonInternalPrefixMissing); !strings.Contains(message, tc.prefix) {
			t.Errorf("%s: event %q does not name the Prefix", tc.name, message)
		}
		requireNoLoadBalancer(t, lbspec.Name(refused))
	}

	public := createService(t, "own-prefix-public", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerPrefix: "team-a-lbs"}})
	ensureUntilReady(t, lbs, public, nodes)
	waitForEvent(t, public, provider.ReasonPrefixIgnored)
}
