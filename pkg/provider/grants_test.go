package provider_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// namespace creates a namespace of the target cluster for the test.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := stack.TargetClientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// annotateLoadBalancer sets (or, with value "", removes) an annotation of an IronCore
// LoadBalancer, as the platform team would with kubectl.
func annotateLoadBalancer(t *testing.T, name, key, value string) {
	t.Helper()
	patch := `{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`
	if value == "" {
		patch = `{"metadata":{"annotations":{"` + key + `":null}}}`
	}
	lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}
	if err := stack.IronCore.Client.Patch(context.Background(), lb, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// refusedAdoption asks for an adoption the provider must refuse: EnsureLoadBalancer fails with
// a NotAdopted Problem saying want, an event says it too, and nothing is written to the retained
// LoadBalancer or made for the Service.
func refusedAdoption(t *testing.T, lbs cloudprovider.LoadBalancer, service *corev1.Service, retained string, want string) string {
	t.Helper()
	stack.IronCoreProxy.Reset()
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", service, workerNodes(t, service.Name+"-1"))
	var problem *lbspec.Problem
	if !errors.As(err, &problem) || problem.Reason != provider.ReasonNotAdopted || !strings.Contains(err.Error(), want) {
		t.Errorf("%s/%s: EnsureLoadBalancer error %v, want a %s saying %q", service.Namespace, service.Name, err, provider.ReasonNotAdopted, want)
	}
	message := waitForEvent(t, service, provider.ReasonNotAdopted)
	if !strings.Contains(message, want) {
		t.Errorf("%s/%s: event %q, want it to say %q", service.Namespace, service.Name, message, want)
	}
	requireNoWrites(t, retained, lbspec.Name(service))
	requireNoLoadBalancer(t, lbspec.Name(service))
	return message
}

// requireNoWrites fails the test if the proxy saw a write to one of the named LoadBalancers
// since its last Reset.
func requireNoWrites(t *testing.T, names ...string) {
	t.Helper()
	for _, write := range stack.IronCoreProxy.Writes() {
		if write.Resource == "loadbalancers" && slices.Contains(names, write.Name) {
			t.Errorf("wrote to IronCore: %s LoadBalancer %s", write.Verb, write.Name)
		}
	}
}

// TestARetainedAddressStaysWithItsNamespace: a Service of another namespace cannot take over a
// retained LoadBalancer, by name, by load-balancer-ips or by spec.loadBalancerIP: the first
// two are refused with an event that does not name the namespace it belongs to, and nothing
// of it changes; with spec.loadBalancerIP the Service gets a new LoadBalancer with another
// address, and the event. The platform team's handover mark gives it to exactly the namespace
// it names (not even the one it came from); removing the mark gives it back.
func TestARetainedAddressStaysWithItsNamespace(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	other := namespace(t, "grants-other")
	retained, addresses := retainedLoadBalancer(t, lbs, "grants-kept")

	byName := map[string]string{keys.AnnotationLoadBalancerName: retained.Name}
	for _, tc := range []struct {
		name string
		opts testenv.ServiceOptions
	}{
		{"grants-by-name", testenv.ServiceOptions{Namespace: other, Annotations: byName}},
		{"grants-by-annotation", testenv.ServiceOptions{Namespace: other, Annotations: map[string]string{keys.AnnotationLoadBalancerIPs: addresses[0]}}},
	} {
		service := createService(t, tc.name, tc.opts)
		message := refusedAdoption(t, lbs, service, retained.Name, "is retained for another namespace")
		if strings.Contains(message, metav1.NamespaceDefault+"/") || strings.Contains(message, "grants-kept") {
			t.Errorf("%s: the event names where the LoadBalancer was retained from: %q", tc.name, message)
		}
	}

	stack.IronCoreProxy.Reset()
	bySpec := createService(t, "grants-by-spec", testenv.ServiceOptions{Namespace: other, LoadBalancerIP: addresses[0]})
	if got := ingressIPs(ensureUntilReady(t, lbs, bySpec, workerNodes(t, "grants-by-spec-1"))); slices.Equal(got, addresses) {
		t.Errorf("the Service of another namespace got the retained addresses %v", got)
	}
	waitForEventWith(t, bySpec, provider.ReasonNotAdopted, "is retained for another namespace")
	requireNoWrites(t, retained.Name)

	// Handed to the other namespace: its Service takes it over, one of the namespace it came
	// from may not.
	annotateLoadBalancer(t, retained.Name, keys.AnnotationRetainedFor, other)
	mine := createService(t, "grants-mine", testenv.ServiceOptions{Annotations: byName})
	refusedAdoption(t, lbs, mine, retained.Name, "is retained for another namespace")
	taker := createService(t, "grants-taker", testenv.ServiceOptions{Namespace: other, Annotations: byName})
	if got := ingressIPs(ensureUntilReady(t, lbs, taker, workerNodes(t, "grants-taker-1"))); !slices.Equal(got, addresses) {
		t.Errorf("the Service of the namespace it was handed to got %v, want the retained addresses %v", got, addresses)
	}
	if lb := ironcoreLoadBalancer(t, retained.Name); lb.UID != retained.UID || ironcore.OwnerOf(lb).UID != string(taker.UID) || lb.Annotations[keys.AnnotationRetainedFor] != "" {
		t.Errorf("LoadBalancer UID %s (was %s), owner %+v, annotations %v: want the same one, the taker's, without the handover mark", lb.UID, retained.UID, ironcore.OwnerOf(lb), lb.Annotations)
	}

	// Handed over and back: the namespace it came from takes it.
	back, backAddresses := retainedLoadBalancer(t, lbs, "grants-back")
	annotateLoadBalancer(t, back.Name, keys.AnnotationRetainedFor, other)
	annotateLoadBalancer(t, back.Name, keys.AnnotationRetainedFor, "")
	again := createService(t, "grants-again", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerIPs: backAddresses[0]}})
	if got := ingressIPs(ensureUntilReady(t, lbs, again, workerNodes(t, "grants-again-1"))); !slices.Equal(got, backAddresses) {
		t.Errorf("the namespace it came from got %v back, want %v", got, backAddresses)
	}
}

// TestAdoptionWaitsForTheClusterIdentity: a provider that does not know its cluster's identity
// yet takes nothing over, whatever the cluster name says: the Service is refused with an event
// and nothing is written; once the identity is known, the same Service takes it over. A
// LoadBalancer without this cluster's identity is never taken over.
func TestAdoptionWaitsForTheClusterIdentity(t *testing.T) {
	ctx := context.Background()
	known := loadBalancerOf(t, testCloud(t))
	unknown := startTestCloud(t, nil)
	lbs := loadBalancerOf(t, unknown)
	retained, addresses := retainedLoadBalancer(t, known, "identity-kept")
	if retained.Labels[keys.LabelClusterID] != testClusterID {
		t.Fatalf("retained LoadBalancer labels %v, want the cluster's identity recorded", retained.Labels)
	}
	service := createService(t, "identity-taker", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerName: retained.Name}})
	nodes := workerNodes(t, "identity-taker-1")
	stack.IronCoreProxy.Reset()
	_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
	if want := "does not know its cluster's identity"; !errorContains(err, want) {
		t.Errorf("EnsureLoadBalancer error %v, want one saying %q", err, want)
	}
	waitForEventWith(t, service, provider.ReasonNotAdopted, "does not know its cluster's identity")
	requireNoWrites(t, retained.Name, lbspec.Name(service))
	requireNoLoadBalancer(t, lbspec.Name(service))

	unknown.ClusterID().Set(testClusterID)
	if got := ingressIPs(ensureUntilReady(t, lbs, service, nodes)); !slices.Equal(got, addresses) {
		t.Errorf("once the identity is known, the Service got %v, want %v", got, addresses)
	}

	// Retained without the identity (as by a CCM that never learnt it): never taken over.
	unmarked, _ := retainedLoadBalancer(t, known, "identity-unmarked")
	patch := `{"metadata":{"labels":{"` + keys.LabelClusterID + `":null}}}`
	if err := stack.IronCore.Client.Patch(ctx, unmarked, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	refusedAdoption(t, lbs, createService(t, "identity-unmarked-taker", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerName: unmarked.Name}}),
		unmarked.Name, "does not carry this cluster's identity")
}

// TestAPartialMatchIsRefused: an Internal Service asking for an address a retained
// LoadBalancer holds, which it cannot take over (it is Public, or it holds another address of
// the other family too), is refused with an event and gets no LoadBalancer of its own with the
// same address.
func TestAPartialMatchIsRefused(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	retained, addresses := retainedLoadBalancer(t, lbs, "partial-kept")
	service := createService(t, "partial-internal", testenv.ServiceOptions{Annotations: map[string]string{
		keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: addresses[0],
	}})
	refusedAdoption(t, lbs, service, retained.Name, "is Public and the Service asks for Internal")

	// Dual-stack, Internal, retained; asked for its IPv4 address alone.
	internal := map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationRetainLoadBalancer: "true"}
	both := createService(t, "partial-both", testenv.ServiceOptions{Annotations: internal, DualStack: true})
	pair := ingressIPs(ensureUntilReady(t, lbs, both, workerNodes(t, "partial-both-1")))
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", both); err != nil {
		t.Fatal(err)
	}
	one := createService(t, "partial-one", testenv.ServiceOptions{DualStack: true, Annotations: map[string]string{
		keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: pair[0],
	}})
	refusedAdoption(t, lbs, one, lbspec.Name(both), "not exactly the requested addresses")
}

// TestAServiceDeletedInTheMiddleOfASwitchRetainsWhatItShows: a Service asking to retain its
// LoadBalancer is deleted while its switch from Public to Internal waits for the new
// LoadBalancer: the Public one, whose address the Service shows, is retained with it, and the
// new one, whose address no client has seen, is deleted.
func TestAServiceDeletedInTheMiddleOfASwitchRetainsWhatItShows(t *testing.T) {
	ctx := context.Background()
	c, lbs, nodes, service, public := readyService(t, "retained-pending-1", "retained-pending", keys.AnnotationRetainLoadBalancer)
	name := lbspec.Name(service)

	// The simulator holds the new LoadBalancer without addresses, as a provider that has not
	// got to it yet.
	held := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name + "-internal"}}
	stack.Simulator.Hold(held)
	t.Cleanup(func() { stack.Simulator.Release(held) })
	service = service.DeepCopy()
	service.Annotations[keys.AnnotationInternalLoadBalancer] = "true"
	testenv.Await(t, ctx, waitTimeout, "LoadBalancer "+held.Name+" to be created", func(ctx context.Context) error {
		if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes); err != nil && !isRetry(err) {
			t.Fatalf("EnsureLoadBalancer: %v", err)
		}
		_, err := c.IronCore().LoadBalancer(ctx, held.Name)
		return err
	})
	successor := ironcoreLoadBalancer(t, held.Name)

	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	lb := ironcoreLoadBalancer(t, name)
	if lb.UID != public.UID || lb.DeletionTimestamp != nil || !ironcore.Retained(lb) || !slices.Equal(ipStringsOf(lb), ingressIPs(&service.Status.LoadBalancer)) {
		t.Errorf("LoadBalancer %s: UID %s (was %s), deleting %v, labels %v, addresses %v: want the one the Service shows (%v) retained",
			name, lb.UID, public.UID, lb.DeletionTimestamp != nil, lb.Labels, ipStringsOf(lb), ingressIPs(&service.Status.LoadBalancer))
	}
	waitForLoadBalancerGone(t, successor)
}

// TestAnInternalServiceUsesOnlyPoolsGivenToItsNamespace: an Internal Service naming a Prefix
// gets an address from it only if the platform team designated it for Services, and for the
// Service's namespace if it names namespaces; the cloud-config's Prefix is every namespace's.
// A Prefix another object controls (as a NetworkInterface controls its pod CIDR's) or a single
// address is refused even if designated. Each refusal is an event naming the Prefix and why,
// with no LoadBalancer made.
func TestAnInternalServiceUsesOnlyPoolsGivenToItsNamespace(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	other := namespace(t, "pools-other")
	nodes := workerNodes(t, "pools-1")
	nic := networkInterface(t, "pools-1")
	pool := map[string]string{keys.LabelLoadBalancerPool: "true"}
	for _, prefix := range []struct {
		name, cidr string
		labels     map[string]string
		namespaces string
		ownedByNIC bool
	}{
		{name: "pools-undesignated", cidr: "10.78.0.0/24"},
		{name: "pools-for-other", cidr: "10.78.1.0/24", labels: pool, namespaces: "team-x, " + other},
		{name: "pools-nic-owned", cidr: "10.78.2.0/24", labels: pool, ownedByNIC: true},
		{name: "pools-single", cidr: "10.78.3.7/32", labels: pool},
	} {
		object := &ipamv1alpha1.Prefix{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: prefix.name, Labels: prefix.labels}}
		object.Spec.Prefix = commonv1alpha1.MustParseNewIPPrefix(prefix.cidr)
		if prefix.namespaces != "" {
			object.Annotations = map[string]string{keys.AnnotationLoadBalancerPoolNamespaces: prefix.namespaces}
		}
		if prefix.ownedByNIC {
			controller := true
			object.OwnerReferences = []metav1.OwnerReference{{APIVersion: networkingv1alpha1.SchemeGroupVersion.String(), Kind: "NetworkInterface", Name: nic.Name, UID: nic.UID, Controller: &controller}}
		}
		if err := stack.IronCore.Client.Create(ctx, object); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), object) })
	}
	internal := func(namespace, prefix string) testenv.ServiceOptions {
		return testenv.ServiceOptions{Namespace: namespace, Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerPrefix: prefix}}
	}

	for _, tc := range []struct{ service, namespace, prefix, want string }{
		{"pools-undesignated", metav1.NamespaceDefault, "pools-undesignated", "is not designated for Services' addresses"},
		{"pools-not-given", metav1.NamespaceDefault, "pools-for-other", "is not given to this namespace"},
		{"pools-nic-owned", other, "pools-nic-owned", "belongs to NetworkInterface " + nic.Name},
		{"pools-single", other, "pools-single", "is a single address"},
	} {
		service := createService(t, tc.service, internal(tc.namespace, tc.prefix))
		requireRefused(t, lbs, service, nodes, tc.want, provider.ReasonPrefixNotGranted, tc.prefix)
	}

	for _, tc := range []struct{ service, namespace, prefix, cidr string }{
		{"pools-given", other, "pools-for-other", "10.78.1.0/24"},
		{"pools-default", other, testenv.LoadBalancerPrefix, "10.1.0.0/16"},
	} {
		service := createService(t, tc.service, internal(tc.namespace, tc.prefix))
		ips := ingressIPs(ensureUntilReady(t, lbs, service, nodes))
		if len(ips) != 1 || !netip.MustParsePrefix(tc.cidr).Contains(netip.MustParseAddr(ips[0])) {
			t.Errorf("%s: ingress %v, want one address from Prefix %s (%s)", tc.service, ips, tc.prefix, tc.cidr)
		}
	}
}

// TestARequestedInternalAddressComesThroughIPAM: an Internal Service's requested address is
// allocated as an exact child of its Prefix; one outside the Prefix (a NetworkInterface's, from
// the Nodes' Prefix), one already allocated from it (another LoadBalancer's) or one a
// LoadBalancer holds as a literal (as the reference CCM made them) is refused with an event,
// and no LoadBalancer is made.
func TestARequestedInternalAddressComesThroughIPAM(t *testing.T) {
	ctx := context.Background()
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "ipam-1")
	internal := func(address string) testenv.ServiceOptions {
		return testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true", keys.AnnotationLoadBalancerIPs: address}}
	}
	first := createService(t, "ipam-first", internal("10.1.222.1"))
	if got := ingressIPs(ensureUntilReady(t, lbs, first, nodes)); !slices.Equal(got, []string{"10.1.222.1"}) {
		t.Fatalf("ingress %v, want the requested 10.1.222.1", got)
	}
	lb := ironcoreLoadBalancer(t, lbspec.Name(first))
	if source := lb.Spec.IPs[0]; source.Value != nil || source.Ephemeral == nil || source.Ephemeral.PrefixTemplate.Spec.Prefix.String() != "10.1.222.1/32" ||
		source.Ephemeral.PrefixTemplate.Spec.ParentRef.Name != testenv.LoadBalancerPrefix {
		t.Fatalf("the LoadBalancer's address source %+v, want 10.1.222.1/32 allocated from %s", source, testenv.LoadBalancerPrefix)
	}
	// Held as a literal, outside IPAM, inside the Prefix.
	const held = "10.1.223.9"
	literal := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "ipam-literal"},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type: networkingv1alpha1.LoadBalancerTypeInternal, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
			IPs:        []networkingv1alpha1.IPSource{{Value: commonv1alpha1.MustParseNewIP(held)}},
		},
	}
	if err := stack.IronCore.Client.Create(ctx, literal); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), literal) })
	waitForCachedLoadBalancer(t, c, literal.Name)
	nicAddress := networkInterface(t, "ipam-1").Status.IPs[0].String()

	for _, tc := range []struct{ service, address, want string }{
		{"ipam-nic", nicAddress, "is not in Prefix " + testenv.LoadBalancerPrefix},
		{"ipam-taken", "10.1.222.1", "is already allocated from Prefix " + testenv.LoadBalancerPrefix},
		{"ipam-literal", held, "is held by another LoadBalancer"},
	} {
		service := createService(t, tc.service, internal(tc.address))
		requireRefused(t, lbs, service, nodes, tc.want, provider.ReasonAddressUnavailable, tc.address)
	}
}

// requireRefused checks that EnsureLoadBalancer refuses the Service with an error saying want
// and an event of the reason naming what, and that nothing is written or made for it.
func requireRefused(t *testing.T, lbs cloudprovider.LoadBalancer, service *corev1.Service, nodes []*corev1.Node, want, reason, what string) {
	t.Helper()
	stack.IronCoreProxy.Reset()
	_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", service, nodes)
	if !errorContains(err, want) {
		t.Errorf("%s: EnsureLoadBalancer error %v, want one saying %q", service.Name, err, want)
	}
	waitForEventWith(t, service, reason, what)
	requireNoWrites(t, lbspec.Name(service))
	requireNoLoadBalancer(t, lbspec.Name(service))
}
