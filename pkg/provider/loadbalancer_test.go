package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

func TestGetLoadBalancerNameIsPure(t *testing.T) {
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"}}
	stack.IronCoreProxy.Reset()
	name := loadBalancerOf(t, cloud).GetLoadBalancerName(context.Background(), "kubernetes", service)
	if name != "0b1c2d3e4f5061728394a5b6c7d8e9f0" {
		t.Fatalf("name %q, want the UID without dashes", name)
	}
	if counts := stack.IronCoreProxy.Counts(); len(counts) != 0 {
		t.Fatalf("GetLoadBalancerName made requests: %v", counts)
	}
}

func TestPublicLoadBalancerWithNICSelector(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-public-1", "lb-public-2")
	service := createService(t, "public", testenv.ServiceOptions{Ports: []corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
	}})

	status := ensureUntilReady(t, lbs, service, nodes)
	name := lbspec.Name(service)
	lb := ironcoreLoadBalancer(t, name)
	if got := ingressIPs(status); len(got) != 1 || got[0] != lb.Status.IPs[0].String() {
		t.Fatalf("ingress %v, want the LoadBalancer's address %v", got, lb.Status.IPs)
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	wantSpec := networkingv1alpha1.LoadBalancerSpec{
		Type:       networkingv1alpha1.LoadBalancerTypePublic,
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
		NetworkInterfaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			keys.LabelCluster: stack.ClusterName, keys.LabelLoadBalancerTarget: stack.ClusterName,
		}},
		Ports: []networkingv1alpha1.LoadBalancerPort{{Protocol: &tcp, Port: 80}, {Protocol: &udp, Port: 53}},
	}
	if !equalJSON(t, lb.Spec, wantSpec) {
		t.Errorf("spec %+v, want %+v", lb.Spec, wantSpec)
	}
	// The owner is recorded as the reference CCM does, and in our labels.
	for key, want := range map[string]string{
		keys.AnnotationClusterName: stack.ClusterName, keys.AnnotationServiceUID: string(service.UID),
		keys.AnnotationServiceName: service.Name, keys.AnnotationServiceNamespace: service.Namespace,
	} {
		if lb.Annotations[key] != want {
			t.Errorf("annotation %s=%q, want %q", key, lb.Annotations[key], want)
		}
	}
	for key, want := range map[string]string{
		keys.LabelClusterName: stack.ClusterName, keys.LabelServiceUID: string(service.UID),
		keys.LabelServiceName: service.Name, keys.LabelServiceNamespace: service.Namespace,
	} {
		if lb.Labels[key] != want {
			t.Errorf("label %s=%q, want %q", key, lb.Labels[key], want)
		}
	}
	// IronCore's loadbalancer controller routes to the selected interfaces.
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-public-1", "lb-public-2"))

	// Nothing changed: another sync writes nothing.
	stack.IronCoreProxy.Reset()
	if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes); err != nil {
		t.Fatal(err)
	}
	// The service controller takes ImplementedElsewhere, compared with ==, as success without
	// an UpdatedLoadBalancer event.
	if err := lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes); err != cloudprovider.ImplementedElsewhere { //nolint:errorlint // the caller compares with ==
		t.Fatalf("UpdateLoadBalancer: %v, want cloudprovider.ImplementedElsewhere itself", err)
	}
	if w := writes(); len(w) > 0 {
		t.Errorf("an unchanged sync wrote to IronCore: %v", w)
	}

	// A Node excluded by label stops receiving traffic, and the service controller passes it no
	// more; zero Nodes is valid and leaves no targets.
	excludeNodes(t, true, "lb-public-2")
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes[:1])); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-public-1"))
	excludeNodes(t, true, "lb-public-1")
	// nil, so that the service controller warns that the Service has no Nodes.
	if err := lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nil); err != nil {
		t.Fatalf("UpdateLoadBalancer with no Nodes: %v, want nil", err)
	}
	stack.WaitForRouting(t, waitTimeout, name, nil)
	excludeNodes(t, false, "lb-public-1", "lb-public-2")
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes)); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-public-1", "lb-public-2"))
}

func TestDualStackPublicLoadBalancer(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	service := createService(t, "dual-public", testenv.ServiceOptions{DualStack: true})
	status := ensureUntilReady(t, lbs, service, workerNodes(t, "lb-dual-1"))
	ips := ingressIPs(status)
	if len(ips) != 2 || !netip.MustParseAddr(ips[0]).Is4() || !netip.MustParseAddr(ips[1]).Is6() {
		t.Fatalf("ingress %v, want an IPv4 and an IPv6 address", ips)
	}
}

func TestInternalLoadBalancer(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-internal-1")
	internal := map[string]string{keys.AnnotationInternalLoadBalancer: "true"}

	service := createService(t, "internal", testenv.ServiceOptions{Annotations: internal, DualStack: true})
	ips := ingressIPs(ensureUntilReady(t, lbs, service, nodes))
	if len(ips) != 2 || !netip.MustParsePrefix("10.1.0.0/16").Contains(netip.MustParseAddr(ips[0])) ||
		!netip.MustParsePrefix("fd00:20::/64").Contains(netip.MustParseAddr(ips[1])) {
		t.Fatalf("ingress %v, want one address from each internal prefix", ips)
	}
	if lb := ironcoreLoadBalancer(t, lbspec.Name(service)); lb.Spec.Type != networkingv1alpha1.LoadBalancerTypeInternal {
		t.Fatalf("type %s, want Internal", lb.Spec.Type)
	}

	// A requested address, by spec.loadBalancerIP and by annotation.
	requested := createService(t, "internal-requested", testenv.ServiceOptions{
		Annotations:    map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: "fd00:20::beef"},
		LoadBalancerIP: "10.1.200.7",
		DualStack:      true,
	})
	if ips := ingressIPs(ensureUntilReady(t, lbs, requested, nodes)); !slices.Equal(ips, []string{"10.1.200.7", "fd00:20::beef"}) {
		t.Fatalf("ingress %v, want the requested addresses", ips)
	}
}

func TestServiceProblemsAreEventsAndErrors(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-problems-1")
	// The targets controller labels the Node's NetworkInterface on its own: not while the
	// writes are counted.
	waitForNICLabel(t, "lb-problems-1", true)
	for _, tc := range []struct {
		name   string
		opts   testenv.ServiceOptions
		modify func(*corev1.Service)
		reason string
		text   string
	}{{
		name:   "misspelt-internal",
		opts:   testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "True"}},
		reason: provider.ReasonInvalidAnnotation,
		text:   `must be "true" or "false", not "True"`,
	}, {
		name:   "public-with-ip",
		opts:   testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerIPs: "203.0.113.10"}},
		reason: provider.ReasonNotAdopted,
		text:   "no IronCore LoadBalancer this cluster retained holds exactly the addresses 203.0.113.10",
	}, {
		name:   "internal-bad-ip",
		opts:   testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: "10.1.0.300"}},
		reason: provider.ReasonInvalidLoadBalancerIP,
		text:   `"10.1.0.300" (annotation ` + keys.AnnotationLoadBalancerIPs + `) is not an IP address`,
	}, {
		name:   "internal-wrong-family",
		opts:   testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: "fd00:20::1"}},
		reason: provider.ReasonInvalidLoadBalancerIP,
		text:   "(annotation " + keys.AnnotationLoadBalancerIPs + ") is IPv6, but the Service's IP families are [IPv4]",
	}, {
		name:   "bad-protocol",
		modify: func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" },
		reason: provider.ReasonUnsupportedPort,
		text:   "protocol ICMP is not supported",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			service := createService(t, tc.name, tc.opts)
			if tc.modify != nil {
				tc.modify(service)
			}
			stack.IronCoreProxy.Reset()
			_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
			if !errorContains(err, tc.text) {
				t.Fatalf("EnsureLoadBalancer error %v, want one containing %q", err, tc.text)
			}
			if message := waitForEvent(t, service, tc.reason); !strings.Contains(message, tc.text) {
				t.Errorf("event message %q does not contain %q", message, tc.text)
			}
			if w := writes(); len(w) > 0 {
				t.Errorf("a rejected Service caused writes: %v", w)
			}
			requireNoLoadBalancer(t, lbspec.Name(service))
		})
	}
}

// TestATypeSwitchNeverLeavesTheServiceWithoutAnAddress switches a Service from Internal to
// Public and back, calling EnsureLoadBalancer as the service controller does and writing what
// it returns into the Service. While the new LoadBalancer has no addresses or no destination,
// the Service keeps the old one's addresses (never none, never a mix), and the old LoadBalancer
// stays; then the status switches at once, and the old LoadBalancer goes once the Service shows
// the new addresses. Deleting the Service in the middle of a switch deletes both.
func TestATypeSwitchNeverLeavesTheServiceWithoutAnAddress(t *testing.T) {
	ctx := context.Background()
	c, lbs, nodes, service, internalLB := readyService(t, "lb-switch-1", "switch", keys.AnnotationInternalLoadBalancer)
	name := lbspec.Name(service)

	// keepsOld syncs the Service as the service controller does and fails unless the sync keeps
	// the addresses it shows and the old LoadBalancer: what every sync must do while the new
	// LoadBalancer has no addresses.
	// ensure syncs the Service as the service controller does: the status to write, or nil
	// when the sync asks to be retried.
	ensure := func() *corev1.LoadBalancerStatus {
		t.Helper()
		status, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
		var retry *api.RetryError
		switch {
		case errors.As(err, &retry):
			return nil
		case err != nil:
			t.Fatalf("EnsureLoadBalancer: %v", err)
		}
		return status
	}
	keepsOld := func(old *networkingv1alpha1.LoadBalancer) {
		t.Helper()
		if status := ensure(); status != nil && !equality.Semantic.DeepEqual(*status, service.Status.LoadBalancer) {
			t.Fatalf("EnsureLoadBalancer returned %v while the new LoadBalancer has no addresses; the Service shows %v", ingressIPs(status), ingressIPs(&service.Status.LoadBalancer))
		}
		if lb := ironcoreLoadBalancer(t, old.Name); lb.UID != old.UID || lb.DeletionTimestamp != nil {
			t.Fatalf("the old LoadBalancer %s is being deleted while the Service still shows its addresses", old.Name)
		}
	}
	// holdSuccessor switches the Service's annotation to internal and syncs it until the new
	// LoadBalancer, successor, exists without addresses: the simulator holds it, as a provider
	// that has not got to it yet, whatever the machine's speed. Every sync keeps the old
	// addresses. The hold ends with the test, or earlier by the returned release.
	holdSuccessor := func(internal string, old *networkingv1alpha1.LoadBalancer, successor string) (release func()) {
		t.Helper()
		held := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: successor}}
		stack.Simulator.Hold(held)
		release = func() { stack.Simulator.Release(held) }
		t.Cleanup(release)
		// Copies, each time: the provider's controllers still read the Service given before.
		service = service.DeepCopy()
		service.Annotations[keys.AnnotationInternalLoadBalancer] = internal
		testenv.Await(t, ctx, waitTimeout, "LoadBalancer "+successor+" to be created", func(ctx context.Context) error {
			keepsOld(old)
			// A namesake replaced by an earlier switch may still be going.
			lb, err := c.IronCore().LoadBalancer(ctx, successor)
			if err == nil && lb.DeletionTimestamp != nil {
				return errors.New("its namesake is still being deleted")
			}
			return err
		})
		// Once more with the new LoadBalancer in the provider's cache, without addresses.
		keepsOld(old)
		return release
	}

	// switchTo switches the Service and returns the new LoadBalancer once the Service shows its
	// addresses and the old one is gone.
	switchTo := func(internal string, old *networkingv1alpha1.LoadBalancer, successor string) *networkingv1alpha1.LoadBalancer {
		t.Helper()
		before := service.Status.LoadBalancer.DeepCopy()
		holdSuccessor(internal, old, successor)()
		testenv.Await(t, ctx, waitTimeout, "the Service to switch to "+successor, func(context.Context) error {
			switch status := ensure(); {
			case status == nil:
			case len(status.Ingress) == 0:
				t.Fatalf("EnsureLoadBalancer returned no addresses during the switch")
			default:
				service = service.DeepCopy()
				service.Status.LoadBalancer = *status
			}
			if equality.Semantic.DeepEqual(service.Status.LoadBalancer, *before) {
				// Until the status switches, the old LoadBalancer serves.
				if lb := ironcoreLoadBalancer(t, old.Name); lb.UID != old.UID || lb.DeletionTimestamp != nil {
					t.Fatalf("the old LoadBalancer %s is being deleted while the Service still shows its addresses", old.Name)
				}
				return errors.New("the Service shows the old addresses")
			}
			return nil
		})
		next := ironcoreLoadBalancer(t, successor)
		if next.UID == old.UID || ingressIPs(&service.Status.LoadBalancer) == nil || !slices.Equal(ingressIPs(&service.Status.LoadBalancer), ipStringsOf(next)) {
			t.Fatalf("the Service shows %v; LoadBalancer %s has %v", ingressIPs(&service.Status.LoadBalancer), next.Name, ipStringsOf(next))
		}
		if lb := ironcoreLoadBalancer(t, old.Name); lb.UID != old.UID || lb.DeletionTimestamp != nil {
			t.Fatalf("the old LoadBalancer %s was deleted before the Service showed the new addresses", old.Name)
		}
		// The service controller's next sync, or the repair controller, sees the new addresses
		// shown: the old LoadBalancer goes.
		if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes); err != nil {
			t.Fatal(err)
		}
		waitForLoadBalancerGone(t, old)
		return next
	}
	publicLB := switchTo("false", internalLB, name+"-public")
	if publicLB.Spec.Type != networkingv1alpha1.LoadBalancerTypePublic {
		t.Fatalf("LoadBalancer %s is %s, want Public", publicLB.Name, publicLB.Spec.Type)
	}
	prefixKey := client.ObjectKey{Namespace: stack.Namespace, Name: networkingv1alpha1.LoadBalancerIPIPAMPrefixName(name, 0)}
	testenv.Await(t, ctx, waitTimeout, "the internal LoadBalancer's prefix to be collected", func(ctx context.Context) error {
		err := stack.IronCore.Client.Get(ctx, prefixKey, &ipamv1alpha1.Prefix{})
		if client.IgnoreNotFound(err) != nil || err == nil {
			return errors.Join(err, errors.New("still there"))
		}
		return nil
	})
	// And back to Internal, under the Service's own name again.
	switchTo("true", publicLB, name)
	internalLB = ironcoreLoadBalancer(t, name)

	// A switch cut short by the Service's deletion leaves nothing: deleted while the new Public
	// LoadBalancer waits for its addresses beside the Internal one.
	holdSuccessor("false", internalLB, name+"-public")
	both := []*networkingv1alpha1.LoadBalancer{internalLB, ironcoreLoadBalancer(t, name+"-public")}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	for _, lb := range both {
		waitForLoadBalancerGone(t, lb)
	}
}

// TestTheReplacedLoadBalancerKeepsItsTargetsUntilTheSwitch: while a type switch waits for the
// new LoadBalancer (here until the test ends: the simulator holds it without addresses), the
// old one carries the Service's traffic, and its routing follows the Nodes as the new
// one's does: a Node that joins meanwhile joins both.
func TestTheReplacedLoadBalancerKeepsItsTargetsUntilTheSwitch(t *testing.T) {
	ctx := context.Background()
	_, lbs, nodes, service := explicitService(t, "pending-switch", "lb-pending-1")
	service.Status.LoadBalancer = *ensureUntilReady(t, lbs, service, nodes)
	name := lbspec.Name(service)
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-pending-1"))
	held := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name + "-internal"}}
	stack.Simulator.Hold(held)
	t.Cleanup(func() { stack.Simulator.Release(held) })

	// A copy: the provider's controllers still read the Service given before.
	service = service.DeepCopy()
	service.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
	if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes); err == nil {
		t.Fatal("the switch completed although the new LoadBalancer cannot get its address")
	}
	successor := ironcoreLoadBalancer(t, name+"-internal")
	nodes = append(nodes, workerNodes(t, "lb-pending-2")...)
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes)); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, successor.Name, stack.NetworkInterfaceIPs(t, "lb-pending-1", "lb-pending-2"))
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-pending-1", "lb-pending-2"))
	if lb := ironcoreLoadBalancer(t, name); lb.DeletionTimestamp != nil {
		t.Fatal("the old LoadBalancer is being deleted while the switch waits")
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	waitForLoadBalancerGone(t, successor)
}

func ipStringsOf(lb *networkingv1alpha1.LoadBalancer) []string {
	var ips []string
	for _, ip := range lb.Status.IPs {
		ips = append(ips, ip.String())
	}
	return ips
}

// waitForLoadBalancerGone waits until the LoadBalancer is deleted or being deleted.
func waitForLoadBalancerGone(t *testing.T, lb *networkingv1alpha1.LoadBalancer) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "LoadBalancer "+lb.Name+" to go", func(ctx context.Context) error {
		current := &networkingv1alpha1.LoadBalancer{}
		err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), current)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && (current.UID != lb.UID || current.DeletionTimestamp != nil)):
			return nil
		case err != nil:
			return err
		}
		return errors.New("still there")
	})
}

func TestExplicitRouting(t *testing.T) {
	ctx := context.Background()
	_, lbs, nodes, service := explicitService(t, "explicit", "lb-explicit-1", "lb-explicit-2")
	ensureUntilReady(t, lbs, service, nodes)
	name := lbspec.Name(service)
	lb := ironcoreLoadBalancer(t, name)
	if lb.Spec.NetworkInterfaceSelector != nil {
		t.Fatalf("selector %v, want none in explicit mode", lb.Spec.NetworkInterfaceSelector)
	}
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-explicit-1", "lb-explicit-2"))
	routing := &networkingv1alpha1.LoadBalancerRouting{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, routing); err != nil {
		t.Fatal(err)
	}
	if refs := routing.OwnerReferences; len(refs) != 1 || refs[0].UID != lb.UID {
		t.Fatalf("owner references %v, want the LoadBalancer", refs)
	}

	excludeNodes(t, true, "lb-explicit-1")
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes[1:])); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-explicit-2"))
	excludeNodes(t, true, "lb-explicit-2")
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nil)); err != nil {
		t.Fatalf("UpdateLoadBalancer with no Nodes: %v", err)
	}
	stack.WaitForRouting(t, waitTimeout, name, nil)

	// A Node whose Machine is gone is left out without failing the update (the node lifecycle
	// controller deletes it), and the others still get traffic.
	gone := stack.CreateNodeForTest(t, "lb-explicit-gone", testenv.NodeOptions{ProviderID: providerIDOf("lb-explicit-gone")})
	excludeNodes(t, false, "lb-explicit-1", "lb-explicit-2")
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, append([]*corev1.Node{gone}, nodes...))); err != nil {
		t.Fatalf("UpdateLoadBalancer with a Node whose Machine is gone: %v", err)
	}
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-explicit-1", "lb-explicit-2"))
}

// TestAddressesThatArriveSoonNeedNoRetry: IronCore allocates a new LoadBalancer's address
// within a moment, and EnsureLoadBalancer waits for it on the cache's watch instead of asking
// the service controller to retry, which it would report as a Warning event on the Service;
// with the repair controller running, as in the CCM, it never asks to retry, and the address
// reaches the Service once its routing holds a destination. Without the repair controller, an
// allocation that takes longer than that short wait is retried as before.
func TestAddressesThatArriveSoonNeedNoRetry(t *testing.T) {
	ctx := context.Background()
	h := startTargets(t, nil)
	h.reportAddressesOnArrival(t)
	routedNodes := workerNodes(t, "lb-soon-routed")
	h.waitForNodesInLister(t, routedNodes)
	soon := createService(t, "address-soon", testenv.ServiceOptions{})
	started := time.Now()
	status, err := h.lbs.EnsureLoadBalancer(ctx, "kubernetes", soon, routedNodes)
	took := time.Since(started)
	if err != nil {
		t.Fatalf("first EnsureLoadBalancer: %v, want no retry", err)
	}
	// Returned without the address: only after waiting for it (1 s, the provider's
	// addressWait), which a loaded machine can take to allocate it.
	if len(ingressIPs(status)) == 0 && took < time.Second {
		t.Fatalf("the first EnsureLoadBalancer returned no address after %s, without waiting for IronCore's", took)
	}
	var lb *networkingv1alpha1.LoadBalancer
	testenv.Await(t, ctx, waitTimeout, "the LoadBalancer's address", func(context.Context) error {
		if lb = ironcoreLoadBalancer(t, lbspec.Name(soon)); len(lb.Status.IPs) != 1 {
			return fmt.Errorf("addresses %v", lb.Status.IPs)
		}
		return nil
	})
	testenv.Await(t, ctx, waitTimeout, "the address in the Service's status", func(context.Context) error {
		shown := ingressIPs(status)
		if len(shown) == 0 {
			shown = ingressIPs(&stack.LiveService(t, soon).Status.LoadBalancer)
		}
		if len(shown) != 1 || shown[0] != lb.Status.IPs[0].String() {
			return fmt.Errorf("ingress %v, want the LoadBalancer's address %v", shown, lb.Status.IPs)
		}
		return nil
	})

	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-soon-1")
	// A stuck provider: the address does not come within the wait.
	late := createService(t, "address-late", testenv.ServiceOptions{})
	held := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(late)}}
	stack.Simulator.Hold(held)
	_, err = lbs.EnsureLoadBalancer(ctx, "kubernetes", late, nodes)
	var retry *api.RetryError
	if !errors.As(err, &retry) {
		t.Fatalf("EnsureLoadBalancer while IronCore holds the address = %v, want a RetryError", err)
	}
	stack.Simulator.Release(held)
	ensureUntilReady(t, lbs, late, nodes)
}

func TestDeletion(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	service := createService(t, "deleted", testenv.ServiceOptions{})
	ensureUntilReady(t, lbs, service, workerNodes(t, "lb-deleted-1"))
	name := lbspec.Name(service)

	// IronCore holds the deletion (apinetlet's finalizer): the call must not wait for it.
	lb := ironcoreLoadBalancer(t, name)
	stack.Simulator.Hold(lb)
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	if lb = ironcoreLoadBalancer(t, name); lb.DeletionTimestamp == nil {
		t.Fatal("the LoadBalancer is not being deleted")
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatalf("second EnsureLoadBalancerDeleted: %v", err)
	}
	stack.Simulator.Release(lb)
	testenv.Await(t, ctx, waitTimeout, "the LoadBalancer to be gone", func(ctx context.Context) error {
		_, exists, err := lbs.GetLoadBalancer(ctx, "kubernetes", service)
		if err != nil || exists {
			return errors.Join(err, errors.New("still exists"))
		}
		return nil
	})
	requireNoLoadBalancer(t, name)
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted of a gone LoadBalancer: %v", err)
	}
}

// TestAConflictOnDeleteIsNotTakenForDone has IronCore answer 409 Conflict to the deletion of
// a Service's LoadBalancer, for a reason other than a changed UID: the call must fail, so that
// the service controller keeps the Service's finalizer and tries again, rather than report a
// deletion that did not happen and leave the LoadBalancer behind.
func TestAConflictOnDeleteIsNotTakenForDone(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	service := createService(t, "delete-conflict", testenv.ServiceOptions{})
	ensureUntilReady(t, lbs, service, workerNodes(t, "lb-delete-conflict-1"))
	name := lbspec.Name(service)

	deletes := func(r apiproxy.Request) bool {
		return r.Verb == "delete" && r.Resource == "loadbalancers.networking.ironcore.dev"
	}
	stack.IronCoreProxy.SetFaults(1, apiproxy.Fault{Kind: apiproxy.Conflict, Rate: 1, Match: deletes})
	t.Cleanup(func() { stack.IronCoreProxy.SetFaults(0) })
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err == nil {
		t.Fatal("EnsureLoadBalancerDeleted reported success, but IronCore refused the deletion")
	}
	if lb := ironcoreLoadBalancer(t, name); lb.DeletionTimestamp != nil {
		t.Fatal("the LoadBalancer is being deleted, though every deletion was refused")
	}
	stack.IronCoreProxy.SetFaults(0)
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatalf("EnsureLoadBalancerDeleted once IronCore accepts it: %v", err)
	}
	lb := &networkingv1alpha1.LoadBalancer{}
	err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb)
	if client.IgnoreNotFound(err) != nil || (err == nil && lb.DeletionTimestamp == nil) {
		t.Fatalf("the LoadBalancer is not being deleted (%v)", err)
	}
}

// TestConcurrentSyncs runs syncs of many Services at once, as the service controller's
// workers do, and checks that every Service ends up with its LoadBalancer and the targets are
// right. Run with -race.
func TestConcurrentSyncs(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-busy-1", "lb-busy-2")
	var services []*corev1.Service
	for i := range 20 {
		services = append(services, createService(t, "busy-"+string(rune('a'+i)), testenv.ServiceOptions{}))
	}
	var wg sync.WaitGroup
	work := make(chan *corev1.Service)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for service := range work {
				ensureUntilReady(t, lbs, service, nodes)
				if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes)); err != nil {
					t.Errorf("UpdateLoadBalancer(%s): %v", service.Name, err)
				}
			}
		}()
	}
	for _, service := range services {
		work <- service
	}
	close(work)
	wg.Wait()
	for _, service := range services {
		if _, exists, err := lbs.GetLoadBalancer(ctx, "kubernetes", service); !exists || err != nil {
			t.Errorf("GetLoadBalancer(%s) = %v, %v", service.Name, exists, err)
		}
	}
	for _, machine := range []string{"lb-busy-1", "lb-busy-2"} {
		if !hasTargetLabel(t, machine) {
			t.Errorf("NetworkInterface of %s is not a target", machine)
		}
	}
}

// TestAStaleNodeListDoesNotDropTargets: a sync may run with a Node list taken before another
// sync's (it waited its turn), so a Node it leaves out stays a target while the Node still
// exists and is eligible; once the Node is excluded by label, it is dropped.
func TestAStaleNodeListDoesNotDropTargets(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "stale-1", "stale-2")
	service := createService(t, "stale-nodes", testenv.ServiceOptions{})
	ensureUntilReady(t, lbs, service, nodes)
	waitForNICLabel(t, "stale-2", true)

	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes[:1])); err != nil {
		t.Fatal(err)
	}
	if !hasTargetLabel(t, "stale-2") {
		t.Fatal("a Node that still exists and is eligible lost its load balancer target label to a stale Node list")
	}

	excludeNodes(t, true, "stale-2")
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes[:1])); err != nil {
		t.Fatal(err)
	}
	waitForNICLabel(t, "stale-2", false)
}

func waitForNICLabel(t *testing.T, machine string, want bool) {
	t.Helper()
	testenv.Await(t, context.Background(), time.Minute, "the target label of "+machine, func(context.Context) error {
		if hasTargetLabel(t, machine) != want {
			return fmt.Errorf("label present: %v, want %v", !want, want)
		}
		return nil
	})
}

// TestAnUninitializedNodeIsNoTarget: the service controller passes Nodes to load balancers
// before this CCM initializes them. One whose Machine is named after it, Ready and with an
// Available NetworkInterface, is still no target until it is initialized: its NetworkInterface
// gets no target label in the sync that labels an initialized Node's.
func TestAnUninitializedNodeIsNoTarget(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	const name = "lb-uninitialized"
	createMachine(t, name, testenv.MachineOptions{})
	// Registered before the peer: the Node informer, which delivers in order, has it by the
	// time it has the peer, whose label shows a sync that saw both.
	uninitialized := stack.CreateNodeForTest(t, name, testenv.NodeOptions{})
	initialized := workerNodes(t, "lb-uninitialized-peer")
	service := createService(t, "uninitialized-target", testenv.ServiceOptions{})
	if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, []*corev1.Node{uninitialized, initialized[0]})); err != nil {
		t.Fatal(err)
	}
	waitForNICLabel(t, initialized[0].Name, true)
	if hasTargetLabel(t, name) {
		t.Fatal("the NetworkInterface of an uninitialized Node is labelled a target")
	}
}

// TestSelectorModeWatchesOnlyItsOwnRoutings: with NetworkInterface selectors, IronCore
// rewrites every LoadBalancerRouting whenever a target joins or leaves; a provider that watched
// them all would decode them all on every such change. It watches only the routings it writes,
// labelled with its cluster's name: neither an unlabelled routing nor another cluster's reaches
// it.
func TestSelectorModeWatchesOnlyItsOwnRoutings(t *testing.T) {
	ctx := context.Background()
	c := startCloudWithConfig(t, "")
	var mu sync.Mutex
	seen := map[string]bool{}
	if err := c.IronCore().OnLoadBalancerRoutingChange(func(routing *networkingv1alpha1.LoadBalancerRouting) {
		mu.Lock()
		defer mu.Unlock()
		seen[routing.Name] = true
	}); err != nil {
		t.Fatal(err)
	}
	for _, routing := range []struct{ name, cluster string }{{"routings-unlabelled", ""}, {"routings-foreign", "another"}, {"routings-own", stack.ClusterName}} {
		object := &networkingv1alpha1.LoadBalancerRouting{
			ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: routing.name},
			NetworkRef: commonv1alpha1.LocalUIDReference{Name: stack.Network},
		}
		if routing.cluster != "" {
			object.Labels = map[string]string{keys.LabelRoutingCluster: routing.cluster}
		}
		if err := stack.IronCore.Client.Create(ctx, object); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), object) })
	}
	// The watch delivers in the order of creation: once the last is seen, the others would
	// have been.
	testenv.Await(t, ctx, waitTimeout, "the provider to see its own routing", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !seen["routings-own"] {
			return errors.New("not yet")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if seen["routings-unlabelled"] || seen["routings-foreign"] {
		t.Errorf("the provider saw routings it does not write: %v", seen)
	}
}

// TestAnAddressNeverLeadsNowhere: a new Service's address is reported only once its routing
// holds a destination, in both modes: an address that leads nowhere is an outage to whoever
// connects to it. The LoadBalancer itself does not wait: with the writes that would route it
// refused (the target labels, or the routing this CCM writes), EnsureLoadBalancer creates it
// and returns at once, without an error (which the service controller would report as a
// Warning) and without the address IronCore gave it. Once IronCore takes writes again, the
// queues' retries route it with no other call, and the repair controller reports the address.
func TestAnAddressNeverLeadsNowhere(t *testing.T) {
	for _, mode := range []struct {
		name     string
		selector bool
		refused  string
	}{
		{"selector", true, "networkinterfaces.networking.ironcore.dev"},
		{"explicit", false, "loadbalancerroutings.networking.ironcore.dev"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			h := startTargets(t, func(o *config.Options) { o.UseNICSelector = mode.selector })
			// The writes are refused before the Node joins: in selector mode its NetworkInterface
			// is labelled as a target as soon as the Node is seen, with or without a Service.
			stack.IronCoreProxy.FailWhere(func(r apiproxy.Request) bool {
				return r.Verb != "get" && r.Verb != "list" && r.Verb != "watch" && r.Resource == mode.refused
			})
			t.Cleanup(func() { stack.IronCoreProxy.FailWhere(nil) })
			machine := "lb-nowhere-" + mode.name
			nodes := workerNodes(t, machine)
			h.waitForNodesInLister(t, nodes)
			h.reportAddressesOnArrival(t)

			service := createService(t, "nowhere-"+mode.name, testenv.ServiceOptions{})
			status, err := h.lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
			if err != nil {
				t.Fatalf("EnsureLoadBalancer while its routing cannot be written: %v, want no error", err)
			}
			if got := ingressIPs(status); len(got) != 0 {
				t.Fatalf("ingress %v while the routing holds no destination", got)
			}
			// The address comes while the routing cannot be written: it does not wait for the
			// targets. Until the provider's cache has it, the status is pending on the address.
			var lb *networkingv1alpha1.LoadBalancer
			testenv.Await(t, ctx, waitTimeout, "the address, pending on traffic", func(ctx context.Context) error {
				if lb = ironcoreLoadBalancer(t, lbspec.Name(service)); len(lb.Status.IPs) == 0 {
					return errors.New("the LoadBalancer has no address")
				}
				switch _, pending, err := h.cloud.AllocatedLoadBalancerStatus(ctx, "kubernetes", service); {
				case err != nil:
					t.Fatalf("AllocatedLoadBalancerStatus: %v", err)
				case pending == lbspec.PendingAddresses:
					return errors.New("the provider's cache has no address yet")
				case pending != lbspec.PendingTraffic:
					t.Fatalf("AllocatedLoadBalancerStatus pending on %v, want it pending on traffic", pending)
				}
				return nil
			})
			if current := stack.LiveService(t, service); len(current.Status.LoadBalancer.Ingress) != 0 {
				t.Fatalf("the Service shows %v while its routing holds no destination", current.Status.LoadBalancer.Ingress)
			}

			stack.IronCoreProxy.FailWhere(nil)
			testenv.Await(t, ctx, waitTimeout, "the address in the Service's status", func(context.Context) error {
				current := stack.LiveService(t, service)
				if got := ingressIPs(&current.Status.LoadBalancer); len(got) != 1 || got[0] != lb.Status.IPs[0].String() {
					return fmt.Errorf("ingress %v", got)
				}
				return nil
			})
			held := &networkingv1alpha1.LoadBalancerRouting{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lb.Name}, held); err != nil || len(held.Destinations) == 0 {
				t.Fatalf("the Service shows its address, its routing: %v, %v", held.Destinations, err)
			}
		})
	}
}

// TestAddressesReachTheServiceWhenIronCoreAllocatesThem: with the repair controller reporting
// addresses on arrival, EnsureLoadBalancer does not ask to be retried while IronCore has not
// allocated a LoadBalancer's addresses (the service controller would record a Warning for each
// retry); the repair controller, watching the LoadBalancer, warns once if that takes long and
// writes the addresses into the Service's status as soon as they arrive. No service controller
// runs here.
func TestAddressesReachTheServiceWhenIronCoreAllocatesThem(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := startCloudWithConfig(t, "")
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "lb-reported-1")
	service := createService(t, "reported", testenv.ServiceOptions{})
	held := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(service)}}
	stack.Simulator.Hold(held)
	t.Cleanup(func() { stack.Simulator.Release(held) })

	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	repair, err := lbrepair.New(lbrepair.Config{
		IronCore:        c.IronCore(),
		LoadBalancers:   lbs,
		AllocatedStatus: c.AllocatedLoadBalancerStatus,
		ClusterName:     "kubernetes",
		Services:        factory.Core().V1().Services(),
		Nodes:           factory.Core().V1().Nodes(),
		PendingWarning:  2 * time.Second,
		Client:          stack.TargetClientset,
		Recorder:        recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.ReportAddressesOnArrival()
	factory.Start(ctx.Done())
	go repair.Run(ctx, 1)

	status, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
	if err != nil {
		t.Fatalf("EnsureLoadBalancer while IronCore holds the address = %v, want no error: the addresses are reported on arrival", err)
	}
	if got := ingressIPs(status); len(got) != 0 {
		t.Fatalf("ingress %v before IronCore allocated any address", got)
	}
	waitForEvent(t, service, lbrepair.ReasonAddressPending)

	stack.Simulator.Release(held)
	testenv.Await(t, ctx, waitTimeout, "the address in the Service's status", func(ctx context.Context) error {
		lb := ironcoreLoadBalancer(t, held.Name)
		current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := ingressIPs(&current.Status.LoadBalancer); len(got) != 1 || len(lb.Status.IPs) != 1 || got[0] != lb.Status.IPs[0].String() {
			return fmt.Errorf("ingress %v, LoadBalancer addresses %v", got, lb.Status.IPs)
		}
		return nil
	})

	// A Service edited into an invalid spec is the Service's problem, reported by its sync; it
	// is not a LoadBalancer waiting for IronCore, and gets no pending Warning.
	invalid := service.DeepCopy()
	invalid.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "maybe"}
	if status, pending, err := c.AllocatedLoadBalancerStatus(ctx, "kubernetes", invalid); status != nil || pending != lbspec.NotPending || err != nil {
		t.Errorf("AllocatedLoadBalancerStatus of an invalid Service = %v, %v, %v; want nothing to report and nothing pending", status, pending, err)
	}
}

// TestLoadBalancersNeedNoNodePorts: IronCore LoadBalancers forward a packet to the Node with the
// load balancer address and the Service port as its destination, so a Service that allocates no
// NodePorts is served like any other, on its own ports; its ingress has ipMode VIP, which tells
// kube-proxy to handle the address on the Node.
func TestLoadBalancersNeedNoNodePorts(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-no-nodeports")
	allocate := false
	service := createService(t, "no-nodeports", testenv.ServiceOptions{
		AllocateLoadBalancerNodePorts: &allocate,
		Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		},
	})
	for _, port := range service.Spec.Ports {
		if port.NodePort != 0 {
			t.Fatalf("port %s has NodePort %d; the Service allocates none", port.Name, port.NodePort)
		}
	}
	status := ensureUntilReady(t, lbs, service, nodes)
	if len(status.Ingress) == 0 {
		t.Fatal("no ingress")
	}
	for _, ingress := range status.Ingress {
		if ingress.IPMode == nil || *ingress.IPMode != corev1.LoadBalancerIPModeVIP {
			t.Errorf("ingress %s has ipMode %v, want VIP", ingress.IP, ingress.IPMode)
		}
	}
	var ports []string
	for _, port := range ironcoreLoadBalancer(t, lbspec.Name(service)).Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d", *port.Protocol, port.Port))
	}
	if want := []string{"TCP/80", "UDP/53"}; !slices.Equal(ports, want) {
		t.Fatalf("LoadBalancer ports %v, want the Service's ports %v", ports, want)
	}
}
