package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	networkingv1alpha1apply "github.com/ironcore-dev/ironcore/client-go/applyconfigurations/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// referenceFieldManager is the field manager the reference CCM applies LoadBalancers with.
const referenceFieldManager = "cloud-provider.ironcore.dev/loadbalancer"

// TestSwitchFromTheReferenceCCM lays out what the reference CCM leaves on IronCore for 50
// Nodes and 20 Services (LoadBalancers selecting NetworkInterfaces by the cluster label only,
// NetworkInterfaces with only that label, pod CIDRs as NetworkInterface prefixes without our
// annotation, Services with their addresses), starts this CCM, and watches every
// LoadBalancerRouting throughout: none may ever hold fewer destinations than before. Then it
// switches --use-nic-selector on and off again under the same watch.
func TestSwitchFromTheReferenceCCM(t *testing.T) {
	ref := layOutReferenceCluster(t, "ref", 50, 20)
	prefixesBefore := nicPrefixesOf(t, ref.names)

	watcher := watchRoutings(t, ref.lbs)
	started := time.Now()
	ccm := startCCMWithoutCrashCheck(t, "ccm-switch", routeArgs()...)
	// The default writes the routings (--use-nic-selector=false).
	waitForSelectorMode(t, ref.lbs, ref.baseline, false)
	t.Logf("adopted %d LoadBalancers of the reference CCM in %s", len(ref.lbs), time.Since(started).Round(time.Millisecond))
	watcher.requireNoDip(t, ref.baseline, "taking over from the reference CCM")
	requireAdoptedInPlace(t, ref.services, ref.lbs)
	if after := nicPrefixesOf(t, ref.names); !equalPrefixes(prefixesBefore, after) {
		t.Errorf("NetworkInterface prefixes changed in the switch:\nbefore %v\nafter  %v", prefixesBefore, after)
	}

	// To selectors, whose labels are written just before they move, and back.
	for _, useSelector := range []bool{true, false} {
		if err := ccm.Stop(); err != nil {
			t.Fatal(err)
		}
		watcher.reset()
		started = time.Now()
		ccm = startCCMWithoutCrashCheck(t, fmt.Sprintf("ccm-switch-selector-%v", useSelector), append(routeArgs(), fmt.Sprintf("--use-nic-selector=%v", useSelector))...)
		waitForSelectorMode(t, ref.lbs, ref.baseline, useSelector)
		t.Logf("switched %d LoadBalancers to --use-nic-selector=%v in %s", len(ref.lbs), useSelector, time.Since(started).Round(time.Millisecond))
		watcher.requireNoDip(t, ref.baseline, fmt.Sprintf("switching to --use-nic-selector=%v", useSelector))
	}

	// A restart, and a leader failover, change nothing: the routings hold throughout.
	if err := ccm.Stop(); err != nil {
		t.Fatal(err)
	}
	watcher.reset()
	ccm = startCCMWithoutCrashCheck(t, "ccm-switch-restart", routeArgs()...)
	waitForLoadBalancerSyncs(t, ccm, len(ref.services))
	watcher.requireNoDip(t, ref.baseline, "restarting")
	if err := ccm.Stop(); err != nil {
		t.Fatal(err)
	}
	watcher.reset()
	leader, follower := startReplicas(t, "ccm-switch-replica")
	waitForLoadBalancerSyncs(t, leader, len(ref.services))
	leader.Kill()
	waitForLoadBalancerSyncs(t, follower, len(ref.services))
	watcher.requireNoDip(t, ref.baseline, "a leader failover")
	requireAdoptedInPlace(t, ref.services, ref.lbs)
}

// TestATakeoverOnASlowNetworkInterfaceListEmptiesNoRouting: a CCM that starts in selector
// mode on the reference CCM's LoadBalancers while IronCore takes 10 s to list
// NetworkInterfaces decides nothing from its empty cache: no selector moves before the target
// labels are in place, and no routing ever holds fewer destinations than before.
func TestATakeoverOnASlowNetworkInterfaceListEmptiesNoRouting(t *testing.T) {
	ref := layOutReferenceCluster(t, "slowlist", 20, 5)
	watcher := watchRoutings(t, ref.lbs)
	// A list, or a watch that begins with the initial list (client-go's streaming list).
	stack.IronCoreProxy.DelayWhere(func(r apiproxy.Request) bool {
		return (r.Verb == "list" || r.Verb == "watch") && r.Resource == "networkinterfaces.networking.ironcore.dev"
	}, 10*time.Second)
	t.Cleanup(func() { stack.IronCoreProxy.DelayWhere(nil, 0) })
	started := time.Now()
	startCCMWithoutCrashCheck(t, "ccm-slow-list", append(routeArgs(), "--use-nic-selector=true")...)
	waitForSelectorMode(t, ref.lbs, ref.baseline, true)
	t.Logf("took over %d LoadBalancers in selector mode in %s with the NetworkInterface list delayed 10 s", len(ref.lbs), time.Since(started).Round(time.Millisecond))
	watcher.requireNoDip(t, ref.baseline, "taking over with a slow NetworkInterface list")
}

// waitForLoadBalancerSyncs waits until the CCM has synced the load balancers of count Services
// since it started.
func waitForLoadBalancerSyncs(t *testing.T, ccm *testenv.Process, count int) {
	t.Helper()
	testenv.Await(t, context.Background(), 2*waitTimeout, ccm.Name+" to sync every load balancer", func(context.Context) error {
		if synced := strings.Count(readLog(ccm), `reason="EnsuredLoadBalancer"`); synced < count {
			return fmt.Errorf("%d synced", synced)
		}
		return nil
	})
}

// referenceCluster is what the reference CCM leaves on IronCore for a cluster: its Nodes'
// (and Machines') names, its Services and their LoadBalancers, and how many destinations each
// LoadBalancer's routing holds once IronCore routes it.
type referenceCluster struct {
	names    []string
	services []*corev1.Service
	lbs      []*networkingv1alpha1.LoadBalancer
	baseline map[string]int
}

// layOutReferenceCluster lays out what the reference CCM leaves for nodeCount Nodes and
// serviceCount Services, named after prefix, and waits until IronCore routes every
// LoadBalancer to every Node.
func layOutReferenceCluster(t *testing.T, prefix string, nodeCount, serviceCount int) referenceCluster {
	t.Helper()
	names := numbered(prefix, nodeCount)
	referenceNodes(t, names)
	services, lbs := referenceServices(t, prefix+"-svc", serviceCount)
	return referenceCluster{names: names, services: services, lbs: lbs, baseline: waitForReferenceRoutings(t, lbs, nodeCount)}
}

// referenceNodes creates running Machines and their Nodes as the reference CCM leaves them:
// initialized, the Machine and NetworkInterface labelled with the cluster name only, and the
// pod CIDR a prefix of the NetworkInterface, without our ownership annotation.
func referenceNodes(t *testing.T, names []string) {
	t.Helper()
	ctx := context.Background()
	createMachines(t, names, testenv.MachineOptions{})
	var wg sync.WaitGroup
	if t.Failed() {
		t.FailNow()
	}
	for i, name := range names {
		wg.Go(func() {
			if err := referenceNode(ctx, name, podCIDRs(i + 1)[0]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

func referenceNode(ctx context.Context, name, podCIDR string) error {
	machine := &computev1alpha1.Machine{}
	nic := &networkingv1alpha1.NetworkInterface{}
	nicKey := client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(name)}
	err := testenv.WaitFor(ctx, provisionTimeout, "Machine "+name+" running with addresses", func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, machine); err != nil {
			return err
		}
		if err := stack.IronCore.Client.Get(ctx, nicKey, nic); err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning || len(nic.Status.IPs) == 0 {
			return fmt.Errorf("machine %q, interface IPs %v", machine.Status.State, nic.Status.IPs)
		}
		return nil
	})
	if err != nil {
		return err
	}
	label := []byte(`{"metadata":{"labels":{"` + keys.LabelCluster + `":"` + stack.ClusterName + `"}}}`)
	if err := stack.IronCore.Client.Patch(ctx, machine, client.RawPatch(types.MergePatchType, label)); err != nil {
		return err
	}
	nicPatch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{keys.LabelCluster: stack.ClusterName}},
		"spec":     map[string]any{"prefixes": []map[string]string{{"value": podCIDR}}},
	})
	if err != nil {
		return err
	}
	if err := stack.IronCore.Client.Patch(ctx, nic, client.RawPatch(types.MergePatchType, nicPatch)); err != nil {
		return err
	}
	node, err := stack.CreateNode(ctx, name, testenv.NodeOptions{ProviderID: "ironcore://" + stack.Namespace + "/" + name, PodCIDRs: []string{podCIDR}})
	if err != nil {
		return err
	}
	if _, err := stack.TargetClientset.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	var addresses []corev1.NodeAddress
	for _, ip := range nic.Status.IPs {
		addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	return stack.SetNodeAddresses(ctx, name, append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name}))
}

// referenceServices creates Services of type LoadBalancer with LoadBalancers as the reference
// CCM made them, and the addresses and finalizer the reference's service controller wrote.
func referenceServices(t *testing.T, prefix string, count int) ([]*corev1.Service, []*networkingv1alpha1.LoadBalancer) {
	t.Helper()
	ctx := context.Background()
	clientset, err := ironcoreclientset.NewForConfig(stack.IronCore.Config)
	if err != nil {
		t.Fatal(err)
	}
	services := make([]*corev1.Service, count)
	lbs := make([]*networkingv1alpha1.LoadBalancer, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			service, err := stack.CreateLoadBalancerService(ctx, fmt.Sprintf("%s-%02d", prefix, i), testenv.ServiceOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { _ = deleteService(service) })
			lb, err := referenceLoadBalancer(ctx, clientset, service)
			if err != nil {
				t.Error(err)
				return
			}
			status, err := json.Marshal(map[string]any{"status": map[string]any{"loadBalancer": map[string]any{"ingress": []map[string]string{{"ip": lb.Status.IPs[0].String()}}}}})
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Patch(ctx, service.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}`), metav1.PatchOptions{}); err != nil {
				t.Error(err)
				return
			}
			if service, err = stack.TargetClientset.CoreV1().Services(service.Namespace).Patch(ctx, service.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
				t.Error(err)
				return
			}
			services[i], lbs[i] = service, lb
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return services, lbs
}

// referenceLoadBalancer applies a LoadBalancer as the reference CCM does: named after the
// Service's UID, with its annotations, its field manager, a selector on the cluster label
// only; and waits for its address.
func referenceLoadBalancer(ctx context.Context, clientset ironcoreclientset.Interface, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	apply := networkingv1alpha1apply.LoadBalancer(lbspec.Name(service), stack.Namespace).
		WithAnnotations(map[string]string{
			keys.AnnotationClusterName:      stack.ClusterName,
			keys.AnnotationServiceName:      service.Name,
			keys.AnnotationServiceNamespace: service.Namespace,
			keys.AnnotationServiceUID:       string(service.UID),
		}).
		WithSpec(networkingv1alpha1apply.LoadBalancerSpec().
			WithType(networkingv1alpha1.LoadBalancerTypePublic).
			WithIPFamilies(service.Spec.IPFamilies...).
			WithNetworkRef(corev1.LocalObjectReference{Name: stack.Network}).
			WithNetworkInterfaceSelector(metav1apply.LabelSelector().WithMatchLabels(map[string]string{keys.LabelCluster: stack.ClusterName})).
			WithPorts(networkingv1alpha1apply.LoadBalancerPort().WithProtocol(corev1.ProtocolTCP).WithPort(80)))
	if _, err := clientset.NetworkingV1alpha1().LoadBalancers(stack.Namespace).Apply(ctx, apply, metav1.ApplyOptions{FieldManager: referenceFieldManager, Force: true}); err != nil {
		return nil, err
	}
	lb := &networkingv1alpha1.LoadBalancer{}
	err := testenv.WaitFor(ctx, waitTimeout, "an address for the reference LoadBalancer of "+service.Name, func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbspec.Name(service)}, lb); err != nil {
			return err
		}
		if len(lb.Status.IPs) == 0 {
			return errors.New("no address yet")
		}
		return nil
	})
	return lb, err
}

// waitForReferenceRoutings waits until IronCore routes every LoadBalancer to at least the
// given number of NetworkInterfaces and returns what each routing holds then.
func waitForReferenceRoutings(t *testing.T, lbs []*networkingv1alpha1.LoadBalancer, atLeast int) map[string]int {
	t.Helper()
	baseline := map[string]int{}
	testenv.Await(t, context.Background(), 2*waitTimeout, "IronCore to route the reference LoadBalancers", func(ctx context.Context) error {
		for _, lb := range lbs {
			routing := &networkingv1alpha1.LoadBalancerRouting{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), routing); err != nil {
				return err
			}
			if len(routing.Destinations) < atLeast {
				return fmt.Errorf("routing %s has %d destinations", lb.Name, len(routing.Destinations))
			}
			baseline[lb.Name] = len(routing.Destinations)
		}
		return nil
	})
	return baseline
}

// routingWatcher records, from a watch that sees every change, the fewest destinations each
// LoadBalancerRouting held.
type routingWatcher struct {
	mu      sync.Mutex
	fewest  map[string]int
	current map[string]int
	since   map[string]time.Time
	dips    []string
}

func watchRoutings(t *testing.T, lbs []*networkingv1alpha1.LoadBalancer) *routingWatcher {
	t.Helper()
	tracked := map[string]bool{}
	for _, lb := range lbs {
		tracked[lb.Name] = true
	}
	w := &routingWatcher{current: map[string]int{}}
	stack.WatchRoutings(t, func(listed []networkingv1alpha1.LoadBalancerRouting) {
		for _, routing := range listed {
			if tracked[routing.Name] {
				w.current[routing.Name] = len(routing.Destinations)
			}
		}
		w.reset()
	}, func(routing *networkingv1alpha1.LoadBalancerRouting, deleted bool) {
		if !tracked[routing.Name] {
			return
		}
		count := len(routing.Destinations)
		if deleted {
			count = 0
		}
		w.observe(routing.Name, count)
	})
	return w
}

func (w *routingWatcher) observe(name string, count int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	previous := w.current[name]
	w.current[name] = count
	if count < w.fewest[name] {
		w.fewest[name] = count
	}
	if count < previous {
		w.since[name] = time.Now()
	} else if since, ok := w.since[name]; ok && count > previous {
		w.dips = append(w.dips, fmt.Sprintf("%s: %d -> %d destinations, back up after %s", name, previous, count, time.Since(since).Round(time.Millisecond)))
		delete(w.since, name)
	}
}

// reset starts a new period of observation from what the routings hold now.
func (w *routingWatcher) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fewest = copyCounts(w.current)
	w.since = map[string]time.Time{}
	w.dips = nil
}

func copyCounts(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// requireNoDip fails the test for every routing that held fewer destinations than baseline
// at any moment since the last reset.
func (w *routingWatcher) requireNoDip(t *testing.T, baseline map[string]int, what string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	lowest := -1
	for name, want := range baseline {
		fewest, ok := w.fewest[name]
		if !ok {
			t.Errorf("%s: routing %s was never seen", what, name)
			continue
		}
		if lowest < 0 || fewest < lowest {
			lowest = fewest
		}
		if fewest < want {
			t.Errorf("%s: routing %s fell to %d destinations, it held %d", what, name, fewest, want)
		}
	}
	for _, dip := range w.dips {
		t.Logf("%s: %s", what, dip)
	}
	t.Logf("%s: the fewest destinations of any routing was %d (each held at least %d before)", what, lowest, slices.Min(mapsValues(baseline)))
}

func mapsValues(m map[string]int) []int {
	values := make([]int, 0, len(m))
	for _, v := range m {
		values = append(values, v)
	}
	return values
}

// waitForSelectorMode waits until every LoadBalancer is in the mode (our selector, or none and
// a routing we write) and its routing holds the baseline again.
func waitForSelectorMode(t *testing.T, lbs []*networkingv1alpha1.LoadBalancer, baseline map[string]int, useSelector bool) {
	t.Helper()
	testenv.Await(t, context.Background(), 3*waitTimeout, fmt.Sprintf("LoadBalancers in --use-nic-selector=%v mode", useSelector), func(ctx context.Context) error {
		for _, want := range lbs {
			lb := &networkingv1alpha1.LoadBalancer{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(want), lb); err != nil {
				return err
			}
			selector := lb.Spec.NetworkInterfaceSelector
			if useSelector && (selector == nil || selector.MatchLabels[keys.LabelLoadBalancerTarget] != stack.ClusterName) {
				return fmt.Errorf("LoadBalancer %s selects %v", lb.Name, selector)
			}
			if !useSelector && selector != nil {
				return fmt.Errorf("LoadBalancer %s still selects %v", lb.Name, selector)
			}
			routing := &networkingv1alpha1.LoadBalancerRouting{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(want), routing); err != nil {
				return err
			}
			if len(routing.Destinations) < baseline[lb.Name] {
				return fmt.Errorf("routing %s has %d destinations", lb.Name, len(routing.Destinations))
			}
		}
		return nil
	})
}

// requireAdoptedInPlace checks that every LoadBalancer is the one the reference made, with
// the address the Service has, and that no other LoadBalancer was made for the Services.
func requireAdoptedInPlace(t *testing.T, services []*corev1.Service, lbs []*networkingv1alpha1.LoadBalancer) {
	t.Helper()
	for i, before := range lbs {
		after := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKeyFromObject(before), after); err != nil {
			t.Fatal(err)
		}
		if after.UID != before.UID || !slices.Equal(after.Status.IPs, before.Status.IPs) {
			t.Errorf("LoadBalancer %s changed: UID %s -> %s, IPs %v -> %v", before.Name, before.UID, after.UID, before.Status.IPs, after.Status.IPs)
		}
		if after.Labels[keys.LabelServiceUID] != string(services[i].UID) {
			t.Errorf("LoadBalancer %s was not adopted: labels %v", after.Name, after.Labels)
		}
		current, err := stack.TargetClientset.CoreV1().Services(services[i].Namespace).Get(context.Background(), services[i].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ingress := current.Status.LoadBalancer.Ingress; len(ingress) != 1 || ingress[0].IP != before.Status.IPs[0].String() {
			t.Errorf("Service %s has ingress %v, want %s", current.Name, ingress, before.Status.IPs[0])
		}
	}
	requireOneLoadBalancerEach(t, services...)
}

func nicPrefixesOf(t *testing.T, machines []string) map[string][]string {
	t.Helper()
	prefixes := map[string][]string{}
	for _, machine := range machines {
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}, nic); err != nil {
			t.Fatal(err)
		}
		for _, source := range nic.Spec.Prefixes {
			if source.Value != nil {
				prefixes[machine] = append(prefixes[machine], source.Value.String())
			}
		}
	}
	return prefixes
}

func equalPrefixes(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
