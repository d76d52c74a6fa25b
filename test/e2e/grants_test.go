package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// waitForLoadBalancer waits until the named IronCore LoadBalancer passes check, and returns it.
func waitForLoadBalancer(t *testing.T, name, what string, check func(*networkingv1alpha1.LoadBalancer) error) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{}
	testenv.Await(t, context.Background(), waitTimeout, "LoadBalancer "+name+" "+what, func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
			return err
		}
		return check(lb)
	})
	return lb
}

// labelled checks that a LoadBalancer's label key is value ("" for absent).
func labelled(key, value string) func(*networkingv1alpha1.LoadBalancer) error {
	return func(lb *networkingv1alpha1.LoadBalancer) error {
		if got := lb.Labels[key]; got != value {
			return fmt.Errorf("label %s is %q", key, got)
		}
		return nil
	}
}

// TestAWishToRetainOutlivesTheService: while a Service asks to retain its LoadBalancer, the
// LoadBalancer carries the wish, and removing the annotation removes it. A Service that asks
// goes while the CCM is down, its finalizer stripped by hand: the CCM that comes up finds the
// LoadBalancer orphaned and retains it, with its addresses, instead of deleting it.
func TestAWishToRetainOutlivesTheService(t *testing.T) {
	ctx := context.Background()
	ccm := startCCMWithoutCrashCheck(t, "ccm-wish-1")
	worker(t, "wish-1")
	service := createService(t, "wish", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "true"}})
	addresses := waitForIngress(t, service, anyIngress)
	name := lbspec.Name(service)
	waitForLoadBalancer(t, name, "carrying the wish", labelled(keys.LabelRetainRequested, "true"))
	setAnnotation(t, service, keys.AnnotationRetainLoadBalancer, "false")
	waitForLoadBalancer(t, name, "without the wish", labelled(keys.LabelRetainRequested, ""))
	setAnnotation(t, service, keys.AnnotationRetainLoadBalancer, "true")
	waitForLoadBalancer(t, name, "carrying the wish again", labelled(keys.LabelRetainRequested, "true"))

	if err := ccm.Stop(); err != nil {
		t.Fatal(err)
	}
	err := updateService(ctx, service, func(current *corev1.Service) { current.Finalizers = nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := deleteService(service); err != nil {
		t.Fatal(err)
	}
	waitForServiceGone(t, service)
	deletions := watchLoadBalancerDeletions(t, name)

	startCCM(t, "ccm-wish-2", "--orphan-load-balancer-grace-period=1s")
	lb := waitForLoadBalancer(t, name, "retained", labelled(keys.LabelRetained, "true"))
	if from := lb.Annotations[keys.AnnotationRetainedFrom]; from != service.Namespace+"/"+service.Name {
		t.Errorf("retained from %q, want %s/%s", from, service.Namespace, service.Name)
	}
	if got := ipsOf(lb); !slices.Equal(got, addresses) {
		t.Errorf("the retained LoadBalancer holds %v, want the Service's addresses %v", got, addresses)
	}
	// A real orphan is collected past the grace period: the sweep that saw the retained one
	// has come and gone.
	kubeSystem, err := stack.TargetClientset.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orphan := orphanLoadBalancer(t, "wish-orphan", stack.ClusterName, "5a4c1d1e-0000-4000-8000-000000000201", string(kubeSystem.UID))
	waitForNoLeftovers(t, []string{orphan.Name})
	if n := deletions.Load(); n > 0 {
		t.Errorf("the LoadBalancer whose Service asked to retain it was deleted or marked for deletion (%d events)", n)
	}
}

// TestARetainedSwitchKeepsTheLoadBalancerItLeaves: a Service asking to retain its LoadBalancer
// switches from Public to Internal: the Public LoadBalancer is retained with its address, never
// deleted, instead of being released. Switched back, the Service takes it back with its address.
func TestARetainedSwitchKeepsTheLoadBalancerItLeaves(t *testing.T) {
	startCCM(t, "ccm-retained-switch")
	worker(t, "retained-switch-1")
	service := createService(t, "retained-switch", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "true"}})
	public := waitForIngress(t, service, anyIngress)
	name := lbspec.Name(service)
	deletions := watchLoadBalancerDeletions(t, name)

	setAnnotation(t, service, keys.AnnotationInternalLoadBalancer, "true")
	internal := waitForIngress(t, service, func(ips []string) error {
		if len(ips) == 0 || slices.Equal(ips, public) {
			return errors.New("not switched yet")
		}
		return nil
	})
	lb := waitForLoadBalancer(t, name, "retained", labelled(keys.LabelRetained, "true"))
	if got := ipsOf(lb); !slices.Equal(got, public) {
		t.Errorf("the retained Public LoadBalancer holds %v, want %v", got, public)
	}

	setAnnotation(t, service, keys.AnnotationInternalLoadBalancer, "false")
	if got := waitForIngress(t, service, func(ips []string) error {
		if slices.Equal(ips, internal) {
			return errors.New("not switched back yet")
		}
		return nil
	}); !slices.Equal(got, public) {
		t.Errorf("switched back, the Service shows %v, want its retained address %v", got, public)
	}
	waitForLoadBalancer(t, name, "taken back", labelled(keys.LabelServiceUID, string(service.UID)))
	if n := deletions.Load(); n > 0 {
		t.Errorf("the retained Public LoadBalancer was deleted or marked for deletion (%d events)", n)
	}
}

// ipsOf are a LoadBalancer's addresses.
func ipsOf(lb *networkingv1alpha1.LoadBalancer) []string {
	ips := make([]string, 0, len(lb.Status.IPs))
	for _, ip := range lb.Status.IPs {
		ips = append(ips, ip.String())
	}
	return ips
}

// TestAddressesStayWithWhomTheyWereGiven runs the CCM binary in a cluster shared by namespaces.
// A retained LoadBalancer is refused to a Service of another namespace, with an event and, as
// the proxy's write log shows, no write to it and no LoadBalancer made, until the platform team
// hands it to that namespace; then exactly that namespace's Service takes it over, and, handed
// back, the namespace it came from takes it back. An Internal Service naming a Prefix not given
// to it (the Nodes' Prefix, a NetworkInterface's, a single address) and one requesting a
// NetworkInterface's address are refused the same way.
func TestAddressesStayWithWhomTheyWereGiven(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-grants")
	worker(t, "grants-1")
	nodes := stack.NetworkInterfaceIPs(t, "grants-1")
	for _, namespace := range []string{"green", "grey"} {
		if _, err := stack.TargetClientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addresses, name := retainedAddresses(t, "grants-kept")

	byName := map[string]string{keys.AnnotationLoadBalancerName: name}
	internal := func(key, value string) map[string]string {
		return map[string]string{keys.AnnotationInternalLoadBalancer: "true", key: value}
	}
	refused := func(service *corev1.Service, reason string, untouched ...string) {
		t.Helper()
		waitForServiceEvent(t, service.Namespace, service.Name, reason)
		for _, write := range stack.IronCoreProxy.Writes() {
			if write.Resource == "loadbalancers" && (write.Name == lbspec.Name(service) || slices.Contains(untouched, write.Name)) {
				t.Errorf("%s/%s: refused, yet the CCM wrote: %s LoadBalancer %s", service.Namespace, service.Name, write.Verb, write.Name)
			}
		}
		if got := stack.LiveService(t, service).Status.LoadBalancer.Ingress; len(got) > 0 {
			t.Errorf("%s/%s: refused, yet it shows %v", service.Namespace, service.Name, got)
		}
	}

	stack.IronCoreProxy.Reset()
	outsider := createService(t, "grants-outsider", testenv.ServiceOptions{Namespace: "grey", Annotations: byName})
	refused(outsider, provider.ReasonNotAdopted, name)
	nicAddress := nodes[0] // a NetworkInterface's, outside the Prefix Internal Services get theirs from
	pool := createService(t, "grants-pool", testenv.ServiceOptions{Namespace: "grey", Annotations: internal(keys.AnnotationLoadBalancerPrefix, testenv.NodePrefixV4)})
	refused(pool, provider.ReasonPrefixNotGranted)
	taken := createService(t, "grants-taken", testenv.ServiceOptions{Namespace: "grey", Annotations: internal(keys.AnnotationLoadBalancerIPs, nicAddress)})
	refused(taken, provider.ReasonAddressUnavailable)
	// The Prefix of the NetworkInterface's address belongs to the NetworkInterface; a single
	// address is no pool, though the platform team labelled it one.
	nicPrefix := networkingv1alpha1.NetworkInterfaceIPIPAMPrefixName(testenv.NetworkInterfaceName("grants-1"), 0)
	owned := createService(t, "grants-owned", testenv.ServiceOptions{Namespace: "grey", Annotations: internal(keys.AnnotationLoadBalancerPrefix, nicPrefix)})
	refused(owned, provider.ReasonPrefixNotGranted)
	single := &ipamv1alpha1.Prefix{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "grants-single", Labels: map[string]string{keys.LabelLoadBalancerPool: "true"}},
		Spec: ipamv1alpha1.PrefixSpec{
			IPFamily:  corev1.IPv4Protocol,
			Prefix:    commonv1alpha1.MustParseNewIPPrefix("10.1.250.1/32"),
			ParentRef: &corev1.LocalObjectReference{Name: testenv.LoadBalancerPrefix},
		},
	}
	if err := stack.IronCore.Client.Create(ctx, single); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), single) })
	one := createService(t, "grants-single", testenv.ServiceOptions{Namespace: "grey", Annotations: internal(keys.AnnotationLoadBalancerPrefix, single.Name)})
	refused(one, provider.ReasonPrefixNotGranted)

	// Handed to green: exactly green's Service takes it over, not even one of the namespace it
	// came from.
	handTo(t, name, "green")
	mine := createService(t, "grants-mine", testenv.ServiceOptions{Annotations: byName})
	refused(mine, provider.ReasonNotAdopted, name)
	if err := deleteService(mine); err != nil {
		t.Fatal(err)
	}
	waitForServiceGone(t, mine)
	retained := map[string]string{keys.AnnotationLoadBalancerName: name, keys.AnnotationRetainLoadBalancer: "true"}
	taker := createService(t, "grants-taker", testenv.ServiceOptions{Namespace: "green", Annotations: retained})
	if got := waitForIngress(t, taker, anyIngress); !slices.Equal(got, addresses) {
		t.Errorf("the Service of the namespace it was handed to shows %v, want the retained %v", got, addresses)
	}
	stack.WaitForRouting(t, waitTimeout, name, nodes)
	if owner := waitForOwner(t, name, []*corev1.Service{taker}); owner != 0 {
		t.Errorf("owner %d", owner)
	}

	// Retained by green, and handed back: the namespace it first came from takes it back.
	if err := deleteService(taker); err != nil {
		t.Fatal(err)
	}
	waitForLoadBalancer(t, name, "retained by green", labelled(keys.LabelRetained, "true"))
	handTo(t, name, metav1.NamespaceDefault)
	back := createService(t, "grants-back", testenv.ServiceOptions{Annotations: byName})
	if got := waitForIngress(t, back, anyIngress); !slices.Equal(got, addresses) {
		t.Errorf("handed back, the namespace it came from shows %v, want the retained %v", got, addresses)
	}
	stack.WaitForRouting(t, waitTimeout, name, nodes)
	if got := stack.LiveService(t, outsider).Status.LoadBalancer.Ingress; len(got) > 0 {
		t.Errorf("the Service of the other namespace shows %v", got)
	}
}

// handTo marks the retained LoadBalancer for namespace, as the platform team does with kubectl.
func handTo(t *testing.T, name, namespace string) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + keys.AnnotationRetainedFor + `":"` + namespace + `"}}}`
	lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}
	if err := stack.IronCore.Client.Patch(context.Background(), lb, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// TestAPartialMatchMakesNoSecondHolder: an Internal Service asks for an address a retained
// LoadBalancer holds but cannot be taken over with: the LoadBalancer is Public, or it holds an
// address of the other family too. Each is refused with an event; the proxy's write log shows no
// LoadBalancer made with the same address and nothing written to the retained one.
func TestAPartialMatchMakesNoSecondHolder(t *testing.T) {
	startCCM(t, "ccm-partial")
	worker(t, "partial-1")
	retainedWith := func(name string, annotations map[string]string, dualStack bool) (string, []string) {
		t.Helper()
		annotations[keys.AnnotationRetainLoadBalancer] = "true"
		service := createService(t, name, testenv.ServiceOptions{Annotations: annotations, DualStack: dualStack})
		addresses := waitForIngress(t, service, anyIngress)
		if err := deleteService(service); err != nil {
			t.Fatal(err)
		}
		lb := lbspec.Name(service)
		waitForLoadBalancer(t, lb, "retained", labelled(keys.LabelRetained, "true"))
		return lb, addresses
	}
	public, publicAddresses := retainedWith("partial-public", map[string]string{}, false)
	internal, pair := retainedWith("partial-pair", map[string]string{keys.AnnotationInternalLoadBalancer: "true"}, true)
	if len(pair) != 2 {
		t.Fatalf("the dual-stack Service showed %v, want an address of each family", pair)
	}

	stack.IronCoreProxy.Reset()
	for _, ask := range []struct {
		name, address, retained, says string
		dualStack                     bool
	}{
		{"partial-other-type", publicAddresses[0], public, "is Public and the Service asks for Internal", false},
		{"partial-one-family", pair[0], internal, "not exactly the requested addresses", true},
	} {
		service := createService(t, ask.name, testenv.ServiceOptions{DualStack: ask.dualStack, Annotations: map[string]string{
			keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: ask.address,
		}})
		waitForServiceEvent(t, service.Namespace, service.Name, provider.ReasonNotAdopted)
		if events := serviceEvents(t, service.Namespace, service.Name, provider.ReasonNotAdopted); !strings.Contains(strings.Join(events, "\n"), ask.says) {
			t.Errorf("%s: events %q, want one saying %q", ask.name, events, ask.says)
		}
		for _, write := range stack.IronCoreProxy.Writes() {
			if write.Resource == "loadbalancers" && (write.Name == ask.retained || write.Name == lbspec.Name(service)) {
				t.Errorf("%s: refused, yet the CCM wrote: %s LoadBalancer %s", ask.name, write.Verb, write.Name)
			}
		}
		if got := stack.LiveService(t, service).Status.LoadBalancer.Ingress; len(got) > 0 {
			t.Errorf("%s: refused, yet it shows %v", ask.name, got)
		}
	}
}

// TestAdoptionWaitsForTheClusterIdentity: the CCM cannot read its cluster's identity (the
// target API server fails its reads of namespaces). A Service naming a LoadBalancer retained by
// this cluster gets an event and no LoadBalancer, and nothing is written to the retained one, as
// the proxy's write log shows: the cluster name alone proves nothing. Once the identity can be
// read, the Service takes it over.
func TestAdoptionWaitsForTheClusterIdentity(t *testing.T) {
	first := startCCMWithoutCrashCheck(t, "ccm-identity-1")
	worker(t, "identity-1")
	addresses, name := retainedAddresses(t, "identity-kept")
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}

	namespaceReads := func(r apiproxy.Request) bool { return r.Verb == "get" && r.Resource == "namespaces" }
	stack.TargetProxy.SetFaults(1, apiproxy.Fault{Kind: apiproxy.ServerError, Rate: 1, Match: namespaceReads})
	t.Cleanup(func() { stack.TargetProxy.SetFaults(0) })
	startCCM(t, "ccm-identity-2")
	stack.IronCoreProxy.Reset()
	taker := createService(t, "identity-taker", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerName: name}})
	waitForServiceEvent(t, taker.Namespace, taker.Name, provider.ReasonNotAdopted)
	if events := serviceEvents(t, taker.Namespace, taker.Name, provider.ReasonNotAdopted); !strings.Contains(strings.Join(events, "\n"), "does not know its cluster's identity") {
		t.Errorf("events %q, want one saying the CCM does not know its cluster's identity", events)
	}
	for _, write := range stack.IronCoreProxy.Writes() {
		if write.Resource == "loadbalancers" && (write.Name == name || write.Name == lbspec.Name(taker)) {
			t.Errorf("the CCM wrote %s LoadBalancer %s without knowing its cluster's identity", write.Verb, write.Name)
		}
	}
	if got := stack.LiveService(t, taker).Status.LoadBalancer.Ingress; len(got) > 0 {
		t.Errorf("the Service shows %v before the identity is known", got)
	}

	stack.TargetProxy.SetFaults(0)
	if got := waitForIngress(t, taker, anyIngress); !slices.Equal(got, addresses) {
		t.Errorf("once the identity is known, the Service shows %v, want the retained %v", got, addresses)
	}
}

// retainedAddresses creates a Service asking to retain its LoadBalancer, waits for its
// addresses, deletes it and waits until its LoadBalancer is retained; it returns the addresses
// and the LoadBalancer's name.
func retainedAddresses(t *testing.T, service string) ([]string, string) {
	t.Helper()
	created := createService(t, service, testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "true"}})
	addresses := waitForIngress(t, created, anyIngress)
	name := lbspec.Name(created)
	if err := deleteService(created); err != nil {
		t.Fatal(err)
	}
	waitForLoadBalancer(t, name, "retained", labelled(keys.LabelRetained, "true"))
	return addresses, name
}
