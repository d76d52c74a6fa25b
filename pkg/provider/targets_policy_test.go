package provider_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// targetsHarness is a provider with informers and the load balancer targets controller
// running, as in the CCM: targets follow endpoints and Node health without the test calling
// the provider.
type targetsHarness struct {
	cloud   *provider.Cloud
	lbs     cloudprovider.LoadBalancer
	factory informers.SharedInformerFactory
}

func startTargets(t *testing.T, modify func(*config.Options)) *targetsHarness {
	t.Helper()
	c, factory, stop := startCloudWithInformers(t, modify)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return &targetsHarness{cloud: c, lbs: loadBalancerOf(t, c), factory: factory}
}

// reportAddressesOnArrival runs the repair controller on the harness, as in the CCM: it writes a
// LoadBalancer's addresses into its Service's status once they are allocated and lead somewhere.
func (h *targetsHarness) reportAddressesOnArrival(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	repair, err := lbrepair.New(lbrepair.Config{
		IronCore:        h.cloud.IronCore(),
		LoadBalancers:   h.lbs,
		AllocatedStatus: h.cloud.AllocatedLoadBalancerStatus,
		ClusterName:     "kubernetes",
		Services:        h.factory.Core().V1().Services(),
		Nodes:           h.factory.Core().V1().Nodes(),
		Client:          stack.TargetClientset,
		Recorder:        recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.cloud.ReportAddressesOnArrival()
	h.factory.Start(ctx.Done())
	go repair.Run(ctx, 1)
}

// waitForNodesInLister waits until the harness's Node lister knows the Nodes.
func (h *targetsHarness) waitForNodesInLister(t *testing.T, nodes []*corev1.Node) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "the Nodes in the lister", func(context.Context) error {
		for _, n := range nodes {
			if _, err := h.factory.Core().V1().Nodes().Lister().Get(n.Name); err != nil {
				return err
			}
		}
		return nil
	})
}

// endpointsOn puts one ready endpoint of the Service on each of the Nodes.
func endpointsOn(nodes ...string) []testenv.Endpoint {
	var endpoints []testenv.Endpoint
	for i, node := range nodes {
		endpoints = append(endpoints, testenv.Endpoint{IP: fmt.Sprintf("10.244.9.%d", i+1), Node: node, Ready: true, Serving: true})
	}
	return endpoints
}

func setEndpoints(t *testing.T, service *corev1.Service, endpoints []testenv.Endpoint) {
	t.Helper()
	if err := stack.SetEndpoints(context.Background(), service, endpoints); err != nil {
		t.Fatal(err)
	}
}

// ipWatcher records every destination address a LoadBalancerRouting held, from a watch that
// sees every change.
type ipWatcher struct {
	mu  sync.Mutex
	ips map[string]bool
}

func (w *ipWatcher) had(ip string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ips[ip]
}

func watchRoutingIPs(t *testing.T, name string) *ipWatcher {
	t.Helper()
	w := &ipWatcher{ips: map[string]bool{}}
	watchRouting(t, name, func(routing *networkingv1alpha1.LoadBalancerRouting, _ bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, destination := range routing.Destinations {
			w.ips[destination.IP.String()] = true
		}
	})
	return w
}

// watchRouting calls observe with the named routing as listed, and with every change a watch
// sees until the test ends (deleted tells a deletion).
func watchRouting(t *testing.T, name string, observe func(routing *networkingv1alpha1.LoadBalancerRouting, deleted bool)) {
	t.Helper()
	stack.WatchRoutings(t, func(routings []networkingv1alpha1.LoadBalancerRouting) {
		for i := range routings {
			if routings[i].Name == name {
				observe(&routings[i], false)
			}
		}
	}, func(routing *networkingv1alpha1.LoadBalancerRouting, deleted bool) {
		if routing.Name == name {
			observe(routing, deleted)
		}
	})
}

// destinationWatcher records, from a watch that sees every change, the fewest destinations a
// LoadBalancerRouting held once it first had some.
type destinationWatcher struct {
	mu     sync.Mutex
	seen   bool
	fewest int
}

func watchDestinations(t *testing.T, name string) *destinationWatcher {
	t.Helper()
	w := &destinationWatcher{}
	watchRouting(t, name, func(routing *networkingv1alpha1.LoadBalancerRouting, deleted bool) {
		w.observe(len(routing.Destinations), deleted)
	})
	return w
}

func (w *destinationWatcher) observe(count int, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if deleted {
		count = 0
	}
	if !w.seen {
		if count > 0 {
			w.seen, w.fewest = true, count
		}
		return
	}
	w.fewest = min(w.fewest, count)
}

// requireNeverEmpty fails the test if the routing held no destination at any moment since it
// first had some.
func (w *destinationWatcher) requireNeverEmpty(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen {
		t.Fatal("the routing never had destinations")
	}
	if w.fewest == 0 {
		t.Fatal("the routing fell to 0 destinations")
	}
	t.Logf("the fewest destinations the routing held: %d", w.fewest)
}

// routingSyncs reads the CCM's count of routing syncs with the result.
func routingSyncs(t *testing.T, result string) float64 {
	t.Helper()
	return testenv.Counter(t, metrics.LoadBalancerRoutingSyncs.WithLabelValues(result))
}

// routingWrites counts the writes to LoadBalancerRoutings since the proxy's last reset.
func routingWrites() int {
	n := 0
	for request, count := range writes() {
		if _, resource, _ := strings.Cut(request, " "); strings.HasPrefix(resource, "loadbalancerroutings") {
			n += count
		}
	}
	return n
}

// TestLocalServiceTargetsFollowItsEndpoints: a Local Service's LoadBalancer targets exactly the
// Nodes with a serving endpoint, following pods that move, a rolling update (a terminating
// endpoint that still serves keeps its Node), a scale to zero (every Node, with an event) and
// back, without any call from the service controller, never with an empty routing, and with
// no IronCore write when the Nodes do not change. In both target modes: with the selector, a
// Local Service still gets a routing of its own.
func TestLocalServiceTargetsFollowItsEndpoints(t *testing.T) {
	testenv.InTargetModes(t, func(t *testing.T, mode string, useSelector bool) {
		h := startTargets(t, func(o *config.Options) { o.UseNICSelector = useSelector })
		prefix := "local-" + mode + "-"
		var names []string
		for i := 1; i <= 5; i++ {
			names = append(names, fmt.Sprintf("%s%d", prefix, i))
		}
		nodes := workerNodes(t, names...)
		h.waitForNodesInLister(t, nodes)
		service := createService(t, prefix+"svc", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
		setEndpoints(t, service, endpointsOn(names[0], names[1]))
		lbName := lbspec.Name(service)
		watcher := watchDestinations(t, lbName)
		ensureUntilReady(t, h.lbs, service, nodes)
		if lb := ironcoreLoadBalancer(t, lbName); lb.Spec.NetworkInterfaceSelector != nil {
			t.Fatalf("a Local Service's LoadBalancer selects %v; it needs a routing of its own", lb.Spec.NetworkInterfaceSelector)
		}
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[0], names[1]))

		// A pod moves from the first Node to the third.
		setEndpoints(t, service, endpointsOn(names[1], names[2]))
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[1], names[2]))

		// A rolling update: the pod on the third Node terminates but still serves while a new
		// one on the fourth is ready; once it stops serving, its Node is dropped.
		rolling := []testenv.Endpoint{
			{IP: "10.244.9.1", Node: names[1], Ready: true, Serving: true},
			{IP: "10.244.9.2", Node: names[2], Ready: false, Serving: true, Terminating: true},
			{IP: "10.244.9.3", Node: names[3], Ready: true, Serving: true},
		}
		setEndpoints(t, service, rolling)
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[1], names[2], names[3]))
		rolling[1].Serving = false
		setEndpoints(t, service, rolling)
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[1], names[3]))

		// Endpoints that change without changing the Nodes write nothing: the next change that
		// does is the only write.
		stack.IronCoreProxy.Reset()
		unchanged := routingSyncs(t, "unchanged")
		setEndpoints(t, service, []testenv.Endpoint{
			{IP: "10.244.9.7", Node: names[1], Ready: true, Serving: true},
			{IP: "10.244.9.8", Node: names[3], Ready: true, Serving: true},
			{IP: "10.244.9.9", Node: names[3], Ready: true, Serving: true},
		})
		testenv.Await(t, context.Background(), waitTimeout, "a sync that finds the routing unchanged", func(context.Context) error {
			if routingSyncs(t, "unchanged") == unchanged {
				return errors.New("none yet")
			}
			return nil
		})
		if n := routingWrites(); n != 0 {
			t.Fatalf("%d routing writes for endpoints that did not change the target Nodes", n)
		}
		setEndpoints(t, service, endpointsOn(names[3]))
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[3]))
		if n := routingWrites(); n != 1 {
			t.Errorf("%d routing writes for one change of the target Nodes, want 1", n)
		}

		// Scaled to zero: every Node, with an event; back to one: that Node.
		setEndpoints(t, service, nil)
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names...))
		waitForEvent(t, service, provider.ReasonNoLocalEndpoints)
		setEndpoints(t, service, endpointsOn(names[4]))
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[4]))
		watcher.requireNeverEmpty(t)
	}, testenv.ModeExplicit, testenv.ModeSelector)
}

// TestSwitchingBetweenClusterAndLocalKeepsTargets: a Service switching from Cluster to Local
// and back, as the service controller syncs it, narrows its targets to the endpoint Nodes and
// widens them again, and its routing never goes empty; with the selector, the LoadBalancer
// stops selecting while Local and selects again after.
func TestSwitchingBetweenClusterAndLocalKeepsTargets(t *testing.T) {
	testenv.InTargetModes(t, func(t *testing.T, mode string, useSelector bool) {
		h := startTargets(t, func(o *config.Options) { o.UseNICSelector = useSelector })
		prefix := "switch-" + mode + "-"
		names := []string{prefix + "1", prefix + "2", prefix + "3"}
		nodes := workerNodes(t, names...)
		h.waitForNodesInLister(t, nodes)
		service := createService(t, prefix+"svc", testenv.ServiceOptions{})
		setEndpoints(t, service, endpointsOn(names[0]))
		lbName := lbspec.Name(service)
		watcher := watchDestinations(t, lbName)
		ensureUntilReady(t, h.lbs, service, nodes)
		all := stack.NetworkInterfaceIPs(t, names...)
		// Other tests' Nodes may be targets of a Cluster Service too; these must be.
		waitForRoutingToInclude(t, lbName, all)

		service = setTrafficPolicy(t, service, corev1.ServiceExternalTrafficPolicyLocal)
		ensureUntilReady(t, h.lbs, service, nodes)
		stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[0]))
		if lb := ironcoreLoadBalancer(t, lbName); lb.Spec.NetworkInterfaceSelector != nil {
			t.Fatalf("the LoadBalancer of a Local Service still selects %v", lb.Spec.NetworkInterfaceSelector)
		}

		service = setTrafficPolicy(t, service, corev1.ServiceExternalTrafficPolicyCluster)
		ensureUntilReady(t, h.lbs, service, nodes)
		waitForRoutingToInclude(t, lbName, all)
		if lb := ironcoreLoadBalancer(t, lbName); (lb.Spec.NetworkInterfaceSelector != nil) != useSelector {
			t.Fatalf("selector %v after switching back, want one: %v", lb.Spec.NetworkInterfaceSelector, useSelector)
		}
		watcher.requireNeverEmpty(t)
	}, testenv.ModeExplicit, testenv.ModeSelector)
}

func setTrafficPolicy(t *testing.T, service *corev1.Service, policy corev1.ServiceExternalTrafficPolicy) *corev1.Service {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"externalTrafficPolicy":%q}}`, policy)
	updated, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Patch(context.Background(), service.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

// waitForRoutingToInclude waits until the routing holds at least the IPs.
func waitForRoutingToInclude(t *testing.T, lbName string, want []string) {
	t.Helper()
	waitForRoutingIPs(t, lbName, "include", want, true)
}

// waitForRoutingToExclude waits until the routing holds none of the IPs.
func waitForRoutingToExclude(t *testing.T, lbName string, unwanted []string) {
	t.Helper()
	waitForRoutingIPs(t, lbName, "exclude", unwanted, false)
}

// waitForRoutingIPs waits until the routing holds each of the IPs (or none of them).
func waitForRoutingIPs(t *testing.T, lbName, what string, ips []string, held bool) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, fmt.Sprintf("routing of %s to %s %v", lbName, what, ips), func(ctx context.Context) error {
		got, err := routingIPs(ctx, lbName)
		if err != nil {
			return err
		}
		for _, ip := range ips {
			if slices.Contains(got, ip) != held {
				return fmt.Errorf("destinations %v", got)
			}
		}
		return nil
	})
}

func routingIPs(ctx context.Context, lbName string) ([]string, error) {
	routing := &networkingv1alpha1.LoadBalancerRouting{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, routing); err != nil {
		return nil, err
	}
	var ips []string
	for _, destination := range routing.Destinations {
		ips = append(ips, destination.IP.String())
	}
	slices.Sort(ips)
	return ips, nil
}

// TestUnhealthyNodesStopBeingTargets: with no change to the Service and no call from the
// service controller, a Node whose Ready condition has been False past the grace period, whose
// Machine is shut down, or that the cluster autoscaler tainted stops being a target of a
// Cluster Service, with an event on the Node, and comes back when healthy. A Node NotReady for
// less than the grace period stays, and leaves when the period ends. In both target modes.
func TestUnhealthyNodesStopBeingTargets(t *testing.T) {
	testenv.InTargetModes(t, func(t *testing.T, mode string, useSelector bool) {
		ctx := context.Background()
		h := startTargets(t, func(o *config.Options) { o.UseNICSelector = useSelector })
		prefix := "health-" + mode + "-"
		names := []string{prefix + "1", prefix + "2", prefix + "3", prefix + "4"}
		nodes := workerNodes(t, names...)
		h.waitForNodesInLister(t, nodes)
		service := createService(t, prefix+"svc", testenv.ServiceOptions{})
		lbName := lbspec.Name(service)
		ensureUntilReady(t, h.lbs, service, nodes)
		waitForRoutingToInclude(t, lbName, stack.NetworkInterfaceIPs(t, names...))
		if useSelector {
			// LoadBalancers that do not select share the Network: IronCore v0.5.0 then misses
			// target label changes for the selecting one unless the CCM nudges it.
			for i := range 3 {
				local := createService(t, fmt.Sprintf("%slocal-%d", prefix, i), testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
				ensureUntilReady(t, h.lbs, local, nodes)
			}
		}

		// NotReady for 2 minutes: past the grace period of 1 minute.
		if _, err := stack.SetNodeReadySince(ctx, names[0], corev1.ConditionFalse, time.Now().Add(-2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		waitForRoutingToExclude(t, lbName, stack.NetworkInterfaceIPs(t, names[0]))
		waitForNodeEvent(t, names[0], lbtargets.ReasonTargetExcluded, "Ready condition has been False")
		if _, err := stack.SetNodeReady(ctx, names[0], corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
		waitForRoutingToInclude(t, lbName, stack.NetworkInterfaceIPs(t, names[0]))
		waitForNodeEvent(t, names[0], lbtargets.ReasonTargetRestored, "healthy again")

		// NotReady since 50 s ago: a target until the grace period ends 10 s later.
		if _, err := stack.SetNodeReadySince(ctx, names[1], corev1.ConditionUnknown, time.Now().Add(-50*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got, err := routingIPs(ctx, lbName); err != nil || !slices.Contains(got, stack.NetworkInterfaceIPs(t, names[1])[0]) {
			t.Fatalf("a Node NotReady within the grace period left the routing: %v %v", got, err)
		}
		waitForRoutingToExclude(t, lbName, stack.NetworkInterfaceIPs(t, names[1]))
		if _, err := stack.SetNodeReady(ctx, names[1], corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}

		// The Machine shut down, as IronCore reports it.
		machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: names[2]}}
		stack.SetPower(t, machine, computev1alpha1.PowerOff)
		waitForRoutingToExclude(t, lbName, stack.NetworkInterfaceIPs(t, names[2]))
		waitForNodeEvent(t, names[2], lbtargets.ReasonTargetExcluded, "is Shutdown")
		stack.SetPower(t, machine, computev1alpha1.PowerOn)
		waitForRoutingToInclude(t, lbName, stack.NetworkInterfaceIPs(t, names[2]))

		// The cluster autoscaler's deletion taint.
		taintNode(t, names[3])
		waitForRoutingToExclude(t, lbName, stack.NetworkInterfaceIPs(t, names[3]))
		waitForRoutingToInclude(t, lbName, stack.NetworkInterfaceIPs(t, names[0], names[1], names[2]))
	}, testenv.ModeExplicit, testenv.ModeSelector)
}

// TestAllUnhealthyFailsOpen: when every Node that could serve a Service is unhealthy, they all
// stay targets, with a Warning on the Service; once one is healthy, only it is.
func TestAllUnhealthyFailsOpen(t *testing.T) {
	ctx := context.Background()
	h := startTargets(t, func(o *config.Options) { o.UseNICSelector = false })
	names := []string{"failopen-1", "failopen-2", "failopen-3"}
	nodes := workerNodes(t, names...)
	h.waitForNodesInLister(t, nodes)
	service := createService(t, "failopen", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
	setEndpoints(t, service, endpointsOn(names[0], names[1]))
	lbName := lbspec.Name(service)
	watcher := watchDestinations(t, lbName)
	ensureUntilReady(t, h.lbs, service, nodes)
	stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[0], names[1]))

	for _, name := range names[:2] {
		if _, err := stack.SetNodeReadySince(ctx, name, corev1.ConditionFalse, time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	message := waitForEvent(t, service, provider.ReasonTargetsFailedOpen)
	if !strings.Contains(message, names[0]) || !strings.Contains(message, names[1]) {
		t.Errorf("the event does not name the unhealthy Nodes: %s", message)
	}
	stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[0], names[1]))

	if _, err := stack.SetNodeReady(ctx, names[1], corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names[1]))
	watcher.requireNeverEmpty(t)
}

// TestNodeHealthCanBeSwitchedOff: with --load-balancer-node-health=false, a Node NotReady for
// an hour stays a target; only the service controller's rules apply.
func TestNodeHealthCanBeSwitchedOff(t *testing.T) {
	ctx := context.Background()
	h := startTargets(t, func(o *config.Options) {
		o.UseNICSelector = false
		o.NodeHealth = false
	})
	names := []string{"nohealth-1", "nohealth-2"}
	nodes := workerNodes(t, names...)
	h.waitForNodesInLister(t, nodes)
	service := createService(t, "nohealth", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
	setEndpoints(t, service, endpointsOn(names...))
	lbName := lbspec.Name(service)
	ensureUntilReady(t, h.lbs, service, nodes)
	stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names...))
	if _, err := stack.SetNodeReadySince(ctx, names[0], corev1.ConditionFalse, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	// An endpoint change makes the controller sync the Service after the Node changed.
	setEndpoints(t, service, append(endpointsOn(names...), testenv.Endpoint{IP: "10.244.9.99", Node: names[1], Ready: true, Serving: true}))
	if err := updated(h.lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes)); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, lbName, stack.NetworkInterfaceIPs(t, names...))
}

// taintNode taints the Node for deletion by the cluster autoscaler.
func taintNode(t *testing.T, name string) {
	t.Helper()
	updateNode(t, name, func(node *corev1.Node) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: servicecontroller.ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule})
	})
}

// updateNode changes the Node as change does, on the API server's copy.
func updateNode(t *testing.T, name string, change func(*corev1.Node)) {
	t.Helper()
	ctx := context.Background()
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(node)
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForNodeEvent waits for an event with the reason on the Node whose message contains text.
func waitForNodeEvent(t *testing.T, node, reason, text string) {
	t.Helper()
	waitForEventText(t, "", "involvedObject.kind=Node,involvedObject.name="+node+",reason="+reason, "event "+reason+" on Node "+node, text)
}

// TestLocalTargetsWaitForTheEndpointCache: right after a start, before the EndpointSlice cache
// has synced, a Local Service's endpoints are unknown; its routing waits for the cache rather
// than send the Service's traffic to every Node as if it had none, and once the cache has
// synced it holds only the Node with an endpoint.
func TestLocalTargetsWaitForTheEndpointCache(t *testing.T) {
	ctx := context.Background()
	// The informers are set but not started yet: the caches have not synced.
	c, factory, stop := startCloudWithInformers(t, explicitTargets)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "unsynced-1", "unsynced-2")
	service := createService(t, "unsynced", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
	setEndpoints(t, service, endpointsOn("unsynced-1"))
	name := lbspec.Name(service)
	seen := watchRoutingIPs(t, name)
	// The address waits too: it would lead nowhere.
	_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
	var retry *api.RetryError
	if !errors.As(err, &retry) {
		t.Fatalf("EnsureLoadBalancer before the endpoints are known = %v, want a RetryError", err)
	}
	if ips, err := routingIPs(ctx, name); err == nil && len(ips) > 0 {
		t.Fatalf("the routing was written without the endpoints: %v", ips)
	}
	factory.Start(stop)
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "unsynced-1"))
	ensureUntilReady(t, lbs, service, nodes)
	for _, ip := range stack.NetworkInterfaceIPs(t, "unsynced-2") {
		if seen.had(ip) {
			t.Fatalf("the routing held %s, of the Node without an endpoint, while the endpoints were not known", ip)
		}
	}
}

// TestASyncRightAfterAnotherIsNotLostToTheCache: two syncs of a routing in quick succession,
// the second wanting it as it was before the first. The cache may not show the first write yet,
// and must not make the second look like it has nothing to write.
func TestASyncRightAfterAnotherIsNotLostToTheCache(t *testing.T) {
	ctx := context.Background()
	c, lbs, nodes, service := explicitService(t, "backtoback", "backtoback-1", "backtoback-2")
	ensureUntilReady(t, lbs, service, nodes)
	name := lbspec.Name(service)
	both := stack.NetworkInterfaceIPs(t, "backtoback-1", "backtoback-2")
	testenv.Await(t, ctx, waitTimeout, "the cache to hold the routing to both Nodes", func(ctx context.Context) error {
		routing, err := c.IronCore().LoadBalancerRouting(ctx, name)
		if err != nil {
			return err
		}
		if ironcore.RoutingDestinationCount(routing) != len(both) {
			return fmt.Errorf("%d destinations", ironcore.RoutingDestinationCount(routing))
		}
		return nil
	})
	for range 5 {
		if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes[:1])); err != nil {
			t.Fatal(err)
		}
		if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes)); err != nil {
			t.Fatal(err)
		}
		stack.WaitForRouting(t, waitTimeout, name, both)
	}
}

// TestTheClustersObjectsAreCachedWithoutManagedFields: the provider has the informers it
// shares with the upstream controllers drop the objects' managed fields, which no controller of
// the CCM reads: a good part of a Node, which every writer of it adds to.
func TestTheClustersObjectsAreCachedWithoutManagedFields(t *testing.T) {
	h := startTargets(t, nil)
	nodes := workerNodes(t, "managed-fields")
	h.waitForNodesInLister(t, nodes)
	stored, err := stack.TargetClientset.CoreV1().Nodes().Get(context.Background(), nodes[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.ManagedFields) == 0 {
		t.Fatal("the API server's Node has no managed fields: the test shows nothing")
	}
	cached, err := h.factory.Core().V1().Nodes().Lister().Get(nodes[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(cached.ManagedFields) != 0 {
		t.Errorf("the cached Node has %d managed fields entries", len(cached.ManagedFields))
	}
}
