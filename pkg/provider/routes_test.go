package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// routesOf returns the Routes of a provider of its own for the test, wired to a Node informer
// of the target cluster as the framework wires it (the package's shared provider has none).
// Routes do not depend on how load balancers find their targets, so this one writes routings
// (of Services that exist) rather than labels: its targets controller makes no IronCore request
// of its own while a test counts them.
func routesOf(t *testing.T) cloudprovider.Routes {
	t.Helper()
	c, factory, stop := startCloudWithInformers(t, explicitTargets)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	r, ok := c.Routes()
	if !ok {
		t.Fatal("Routes is not implemented")
	}
	return syncedRoutes{Routes: r, nodes: factory.Core().V1().Nodes().Lister()}
}

// syncedRoutes are the provider's Routes as the route controller calls them: for a Node its
// informer has as the API server has it, as the controller runs on that informer. A test
// makes a Node and routes it at once; a slow machine's informer may not have it yet.
type syncedRoutes struct {
	cloudprovider.Routes
	nodes corelisters.NodeLister
}

func (r syncedRoutes) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	name := string(route.TargetNode)
	err := testenv.WaitFor(ctx, waitTimeout, "the Node informer to have Node "+name, func(ctx context.Context) error {
		node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil // the route of a Node that does not exist: the provider tells
		case err != nil:
			return err
		}
		seen, err := r.nodes.Get(name)
		if err != nil {
			return err
		}
		if seen.ResourceVersion != node.ResourceVersion {
			return fmt.Errorf("it has version %s, the API server %s", seen.ResourceVersion, node.ResourceVersion)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return r.Routes.CreateRoute(ctx, clusterName, nameHint, route)
}

// routeNode creates a running dual-stack Machine and an initialized Node for it, with its pod
// CIDRs and its NetworkInterface's IPs as InternalIPs, and returns the Node.
func routeNode(t *testing.T, name string, podCIDRs ...string) *corev1.Node {
	t.Helper()
	createMachine(t, name, testenv.MachineOptions{DualStack: true})
	var addresses []corev1.NodeAddress
	for _, ip := range networkInterface(t, name).Status.IPs {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	return routeNodeWithAddresses(t, name, addresses, podCIDRs...)
}

// routeNodeWithAddresses creates an initialized Node with the addresses for an existing Machine.
func routeNodeWithAddresses(t *testing.T, name string, addresses []corev1.NodeAddress, podCIDRs ...string) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	if _, err := stack.CreateNode(ctx, name, testenv.NodeOptions{ProviderID: providerIDOf(name), PodCIDRs: podCIDRs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if err := stack.SetNodeAddresses(ctx, name, addresses); err != nil {
		t.Fatal(err)
	}
	labelForCluster(t, name)
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// labelForCluster puts the cluster label on the Machine's NetworkInterface, as the
// cluster-label controller would.
func labelForCluster(t *testing.T, machine string) {
	t.Helper()
	nic := networkInterface(t, machine)
	base := nic.DeepCopy()
	if nic.Labels == nil {
		nic.Labels = map[string]string{}
	}
	nic.Labels[keys.LabelCluster] = stack.ClusterName
	if err := stack.IronCore.Client.Patch(context.Background(), nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func route(node *corev1.Node, cidr string) *cloudprovider.Route {
	return &cloudprovider.Route{TargetNode: types.NodeName(node.Name), TargetNodeAddresses: node.Status.Addresses, DestinationCIDR: cidr}
}

// specPrefixes lists the literal prefixes of the Machine's NetworkInterface, and how many
// ephemeral ones it has.
func specPrefixes(t *testing.T, machine string) ([]string, int) {
	t.Helper()
	var literal []string
	ephemeral := 0
	for _, source := range networkInterface(t, machine).Spec.Prefixes {
		if source.Value != nil {
			literal = append(literal, source.Value.String())
		} else {
			ephemeral++
		}
	}
	sort.Strings(literal)
	return literal, ephemeral
}

// waitForListedRoutes waits until ListRoutes reports exactly these "node cidr" pairs among the
// routes of the named NetworkInterfaces.
func waitForListedRoutes(t *testing.T, nicPrefix string, want ...string) {
	t.Helper()
	slices.Sort(want)
	routes := routesOf(t)
	testenv.Await(t, context.Background(), waitTimeout, fmt.Sprintf("routes %v", want), func(ctx context.Context) error {
		list, err := routes.ListRoutes(ctx, "kubernetes")
		if err != nil {
			return err
		}
		got := []string{}
		for _, r := range list {
			if strings.HasPrefix(r.Name, nicPrefix) {
				got = append(got, string(r.TargetNode)+" "+r.DestinationCIDR)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("listed %v", got)
		}
		return nil
	})
}

func TestDualStackRoutes(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	node := routeNode(t, "route-dual", "10.244.1.0/24", "fd00:244:1::/64")
	var wg sync.WaitGroup
	for _, cidr := range node.Spec.PodCIDRs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := routes.CreateRoute(ctx, "kubernetes", string(node.UID), route(node, cidr)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if literal, _ := specPrefixes(t, "route-dual"); !slices.Equal(literal, []string{"10.244.1.0/24", "fd00:244:1::/64"}) {
		t.Fatalf("prefixes %v, want both pod CIDRs", literal)
	}
	waitForListedRoutes(t, "route-dual", "route-dual 10.244.1.0/24", "route-dual fd00:244:1::/64")
}

func TestCreateRouteIsIdempotentWhileStatusLags(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	node := routeNode(t, "route-lag", "10.244.2.0/24")
	// The provider stops reporting: status.prefixes never shows the route.
	nic := networkInterface(t, "route-lag")
	stack.Simulator.Hold(nic)
	t.Cleanup(func() { stack.Simulator.Release(nic) })
	for range 3 {
		if err := routes.CreateRoute(ctx, "kubernetes", string(node.UID), route(node, "10.244.2.0/24")); err != nil {
			t.Fatal(err)
		}
	}
	if literal, _ := specPrefixes(t, "route-lag"); !slices.Equal(literal, []string{"10.244.2.0/24"}) {
		t.Fatalf("prefixes %v, want the pod CIDR once", literal)
	}
	// Once the cache shows the route, asking again is free: the route controller asks on
	// every pass for any route its listing misses.
	testenv.Await(t, ctx, time.Minute, "the cache to show the route", func(ctx context.Context) error {
		cached, err := cloud.IronCore().NetworkInterface(ctx, nic.Name)
		if err != nil {
			return err
		}
		if len(cached.Spec.Prefixes) != 1 {
			return fmt.Errorf("prefixes %v", cached.Spec.Prefixes)
		}
		return nil
	})
	stack.IronCoreProxy.Reset()
	if err := routes.CreateRoute(ctx, "kubernetes", string(node.UID), route(node, "10.244.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if counts := stack.IronCoreProxy.Counts(); len(counts) != 0 {
		t.Errorf("CreateRoute of a route already in place made IronCore requests: %v", counts)
	}
}

func TestCreateRouteFailsWhenItCannotPlaceTheRoute(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)

	// A Node whose address is on none of its Machine's NetworkInterfaces.
	createMachine(t, "route-wrongaddr", testenv.MachineOptions{})
	routeNodeWithAddresses(t, "route-wrongaddr", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.99"}}, "10.244.4.0/24")
	for _, tc := range []struct {
		node, cidr, want string
	}{
		{"route-wrongaddr", "10.244.4.0/24", "has one of the Node's InternalIPs"},
		{"no-such-node", "10.244.5.0/24", "not found"},
	} {
		err := testenv.WaitFor(ctx, waitTimeout, "an error for "+tc.node, func(ctx context.Context) error {
			r := &cloudprovider.Route{TargetNode: types.NodeName(tc.node), DestinationCIDR: tc.cidr}
			err := routes.CreateRoute(ctx, "kubernetes", "", r)
			switch {
			case err == nil:
				return errors.New("CreateRoute succeeded")
			case !strings.Contains(err.Error(), tc.want):
				return fmt.Errorf("CreateRoute: %w", err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	if literal, _ := specPrefixes(t, "route-wrongaddr"); len(literal) != 0 {
		t.Errorf("prefixes %v were added although the route could not be placed", literal)
	}
}

// TestANodeWithoutAnInternalIPYetGetsItsRoute: kube-controller-manager gives a new Node its
// pod CIDR before this CCM initializes it, and the route controller asks for the route at once.
// The Machine's only NetworkInterface on the cluster Network is where the Node's InternalIP
// will come from, so the route is placed there without waiting; failing until then would be a
// Warning event on every new Node.
func TestANodeWithoutAnInternalIPYetGetsItsRoute(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	for _, tc := range []struct{ name, providerID, cidr string }{
		{name: "route-uninitialized", cidr: "10.244.3.0/24"},
		{name: "route-noaddr", providerID: providerIDOf("route-noaddr"), cidr: "10.244.7.0/24"},
	} {
		createMachine(t, tc.name, testenv.MachineOptions{})
		if _, err := stack.CreateNode(ctx, tc.name, testenv.NodeOptions{ProviderID: tc.providerID, PodCIDRs: []string{tc.cidr}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), tc.name, metav1.DeleteOptions{})
		})
		testenv.Await(t, ctx, waitTimeout, "the route of "+tc.name, func(ctx context.Context) error {
			return routes.CreateRoute(ctx, "kubernetes", "", &cloudprovider.Route{TargetNode: types.NodeName(tc.name), DestinationCIDR: tc.cidr})
		})
		if literal, _ := specPrefixes(t, tc.name); !slices.Equal(literal, []string{tc.cidr}) {
			t.Errorf("prefixes of %s: %v, want its pod CIDR", tc.name, literal)
		}
		waitForListedRoutes(t, tc.name, tc.name+" "+tc.cidr)
	}
}

func TestOtherPrefixesAreNeverTouched(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	node := routeNode(t, "route-shared", "10.244.6.0/24")
	// Someone else's prefixes: an ephemeral one, and a literal one inside the cluster CIDR.
	nic := networkInterface(t, "route-shared")
	base := nic.DeepCopy()
	nic.Spec.Prefixes = append(nic.Spec.Prefixes,
		networkingv1alpha1.PrefixSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{
			Spec: ipamv1alpha1.PrefixSpec{IPFamily: corev1.IPv4Protocol, PrefixLength: 30, ParentRef: &corev1.LocalObjectReference{Name: testenv.NodePrefixV4}},
		}}},
		networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: netip.MustParsePrefix("10.244.250.0/24")}},
	)
	if err := stack.IronCore.Client.Patch(ctx, nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, "10.244.6.0/24")); err != nil {
		t.Fatal(err)
	}
	waitForListedRoutes(t, "route-shared", "route-shared 10.244.6.0/24")

	// Deleting someone else's prefix as if it were a route does nothing.
	foreign := &cloudprovider.Route{Name: testenv.NetworkInterfaceName("route-shared") + "/10.244.250.0/24", TargetNode: "route-shared", DestinationCIDR: "10.244.250.0/24"}
	if err := routes.DeleteRoute(ctx, "kubernetes", foreign); err != nil {
		t.Fatal(err)
	}
	listed, err := routes.ListRoutes(ctx, "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range listed {
		if r.DestinationCIDR == "10.244.250.0/24" {
			t.Fatalf("someone else's prefix is listed as a route: %+v", r)
		}
		if strings.HasPrefix(r.Name, "route-shared") {
			if err := routes.DeleteRoute(ctx, "kubernetes", r); err != nil {
				t.Fatal(err)
			}
		}
	}
	literal, ephemeral := specPrefixes(t, "route-shared")
	if !slices.Equal(literal, []string{"10.244.250.0/24"}) || ephemeral != 1 {
		t.Fatalf("prefixes %v and %d ephemeral, want only the others' prefixes", literal, ephemeral)
	}
	waitForListedRoutes(t, "route-shared")
}

func TestPrefixesOfTheReferenceCCMAreTakenOver(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	node := routeNode(t, "route-adopted", "10.244.7.0/24")
	// The reference CCM added the pod CIDR, twice (its duplicate bug), without our annotation.
	nic := networkInterface(t, "route-adopted")
	base := nic.DeepCopy()
	for range 2 {
		nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: netip.MustParsePrefix("10.244.7.0/24")}})
	}
	if err := stack.IronCore.Client.Patch(ctx, nic, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, "10.244.7.0/24")); err != nil {
		t.Fatal(err)
	}
	if literal, _ := specPrefixes(t, "route-adopted"); len(literal) != 2 {
		t.Fatalf("prefixes %v: the route was added again", literal)
	}
	waitForListedRoutes(t, "route-adopted", "route-adopted 10.244.7.0/24")
	listed, err := routes.ListRoutes(ctx, "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range listed {
		if strings.HasPrefix(r.Name, "route-adopted") {
			if err := routes.DeleteRoute(ctx, "kubernetes", r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if literal, _ := specPrefixes(t, "route-adopted"); len(literal) != 0 {
		t.Fatalf("prefixes %v left after deleting the route", literal)
	}
}

// TestConcurrentRouteChangesLoseNothing creates and deletes routes on one NetworkInterface from
// many goroutines at once, round after round, and checks that every change took effect.
func TestConcurrentRouteChangesLoseNothing(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	node := routeNode(t, "route-busy")
	cidr := func(i int) string { return fmt.Sprintf("10.245.%d.0/24", i) }
	want := map[string]bool{}
	for round := range 8 {
		var wg sync.WaitGroup
		// Each round adds four CIDRs and deletes two of those the previous round added.
		for i := range 4 {
			c := cidr(round*4 + i)
			want[c] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, c)); err != nil {
					t.Error(err)
				}
			}()
		}
		for i := range 2 {
			if round == 0 {
				break
			}
			c := cidr((round-1)*4 + i)
			delete(want, c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := &cloudprovider.Route{Name: testenv.NetworkInterfaceName("route-busy") + "/" + c, TargetNode: "route-busy", DestinationCIDR: c}
				if err := routes.DeleteRoute(ctx, "kubernetes", r); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	var wantList []string
	for c := range want {
		wantList = append(wantList, c)
	}
	sort.Strings(wantList)
	if literal, _ := specPrefixes(t, "route-busy"); !slices.Equal(literal, wantList) {
		t.Fatalf("prefixes %v, want %v", literal, wantList)
	}
}

func TestRoutesOfADeletedNodeHaveNoTarget(t *testing.T) {
	ctx := context.Background()
	routes := routesOf(t)
	node := routeNode(t, "route-orphan", "10.244.8.0/24")
	if err := routes.CreateRoute(ctx, "kubernetes", "", route(node, "10.244.8.0/24")); err != nil {
		t.Fatal(err)
	}
	waitForListedRoutes(t, "route-orphan", "route-orphan 10.244.8.0/24")
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Listed without a target Node, which makes the route controller delete it; the other
	// routes are still listed.
	waitForListedRoutes(t, "route-orphan", " 10.244.8.0/24")
}
