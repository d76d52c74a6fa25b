package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	cloudproviderapi "k8s.io/cloud-provider/api"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// Stopwatch keys of the burst's objects. A Service has two: its address (service/) and its
// IronCore LoadBalancerRouting reaching every Node (lbrouting/).
func nodeKey(name string) string      { return "node/" + name }
func serviceKey(name string) string   { return "service/" + name }
func routeKey(name string) string     { return "route/" + name }
func lbRoutingKey(name string) string { return "lbrouting/" + name }

// lbFirstKey is a Service's routing holding its first Node: from then on, with an address,
// its traffic reaches a Node.
func lbFirstKey(name string) string { return "lbfirst/" + name }

// The stages of a Service's address: taken by the upstream service controller, which puts its
// cleanup finalizer on the Service before it asks the CCM for a load balancer (lbtaken/), its
// IronCore LoadBalancer created (lbcreated/) and given an address by IronCore (lbaddress/),
// before the CCM reports it on the Service.
func lbTakenKey(name string) string   { return "lbtaken/" + name }
func lbCreatedKey(name string) string { return "lbcreated/" + name }
func lbAddressKey(name string) string { return "lbaddress/" + name }

// The stopwatch keys of a burst Node and Service: the run has converged once all are done.
func nodeKeys(name string) []string { return []string{nodeKey(name), routeKey(name)} }
func serviceKeys(name string) []string {
	return []string{serviceKey(name), lbRoutingKey(name), lbFirstKey(name), lbTakenKey(name), lbCreatedKey(name), lbAddressKey(name)}
}

// tracker times the burst's Nodes, Services, routes and load balancer routings from watches of
// both control planes.
type tracker struct {
	*stopwatch
	nodes, services int
	// targets maps the names and addresses of the Nodes' NetworkInterfaces to their names, to
	// tell which Node a load balancer destination reaches.
	targets map[string]string

	mu sync.Mutex
	// serviceOf maps an IronCore LoadBalancer's name to the burst Service it serves, and
	// loadBalancerOf back; its LoadBalancerRouting has the same name.
	serviceOf, loadBalancerOf map[string]string
	// firstAt and routedAt are when each LoadBalancerRouting was first seen reaching a Node,
	// and every Node; reaching is how many Nodes it reaches now.
	firstAt, routedAt map[string]time.Time
	reaching          map[string]int
	// addressed tells the Services that show an address now.
	addressed map[string]bool
	// nowhere times, by Service, each stretch in which it showed an address while its routing
	// reached no Node: when the current one began, and the longest.
	nowhereSince   map[string]time.Time
	nowhereLongest map[string]time.Duration
	// nodeOfNIC maps each NetworkInterface to its Node (its Machine's name); eligibleAt is when
	// each Node was first initialized and Ready, so able to serve; includedAt is, by routing and
	// NetworkInterface, when the routing was first seen holding it.
	nodeOfNIC  map[string]string
	eligibleAt map[string]time.Time
	includedAt map[string]map[string]time.Time
}

func newTracker(ctx context.Context, stack *testenv.Stack, nodes, services int) (*tracker, error) {
	nics := &networkingv1alpha1.NetworkInterfaceList{}
	if err := stack.IronCore.Client.List(ctx, nics, client.InNamespace(stack.Namespace)); err != nil {
		return nil, fmt.Errorf("list the Nodes' NetworkInterfaces: %w", err)
	}
	t := &tracker{
		stopwatch: newStopwatch(len(nodeKeys(""))*nodes + len(serviceKeys(""))*services),
		nodes:     nodes, services: services,
		targets:   targetsOf(nics.Items),
		serviceOf: map[string]string{}, loadBalancerOf: map[string]string{},
		firstAt: map[string]time.Time{}, routedAt: map[string]time.Time{}, reaching: map[string]int{},
		addressed: map[string]bool{}, nowhereSince: map[string]time.Time{}, nowhereLongest: map[string]time.Duration{},
		nodeOfNIC: map[string]string{}, eligibleAt: map[string]time.Time{}, includedAt: map[string]map[string]time.Time{},
	}
	for _, nic := range nics.Items {
		if nic.Spec.MachineRef != nil {
			t.nodeOfNIC[nic.Name] = nic.Spec.MachineRef.Name
		}
	}
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(onAddOrUpdate(func(obj any) {
		if node, ok := obj.(*corev1.Node); ok && node.Spec.ProviderID != "" && !slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool {
			return taint.Key == cloudproviderapi.TaintExternalCloudProvider
		}) {
			t.done(nodeKey(node.Name))
			if slices.ContainsFunc(node.Status.Conditions, func(condition corev1.NodeCondition) bool {
				return condition.Type == corev1.NodeReady && condition.Status == corev1.ConditionTrue
			}) {
				t.mu.Lock()
				if _, seen := t.eligibleAt[node.Name]; !seen {
					t.eligibleAt[node.Name] = time.Now()
				}
				t.mu.Unlock()
			}
		}
	})); err != nil {
		return nil, err
	}
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(onAddOrUpdate(func(obj any) {
		service, ok := obj.(*corev1.Service)
		if !ok || service.Namespace != metav1.NamespaceDefault {
			return
		}
		if slices.Contains(service.Finalizers, servicehelpers.LoadBalancerCleanupFinalizer) {
			t.done(lbTakenKey(service.Name))
		}
		if len(service.Status.LoadBalancer.Ingress) > 0 {
			t.done(serviceKey(service.Name))
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		t.addressed[service.Name] = len(service.Status.LoadBalancer.Ingress) > 0
		t.checkNowhere(service.Name, time.Now())
	})); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())

	ironcoreCache, err := cache.New(stack.IronCore.Config, cache.Options{
		Scheme:            stack.IronCore.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{stack.Namespace: {}},
	})
	if err != nil {
		return nil, err
	}
	handlers := []struct {
		obj    client.Object
		handle func(obj any)
	}{
		{&networkingv1alpha1.NetworkInterface{}, t.networkInterfaceChanged},
		{&networkingv1alpha1.LoadBalancer{}, t.loadBalancerChanged},
		{&networkingv1alpha1.LoadBalancerRouting{}, t.routingChanged},
	}
	for _, h := range handlers {
		informer, err := ironcoreCache.GetInformer(ctx, h.obj)
		if err != nil {
			return nil, fmt.Errorf("watch %T: %w", h.obj, err)
		}
		if _, err := informer.AddEventHandler(onAddOrUpdate(h.handle)); err != nil {
			return nil, err
		}
	}
	go func() { _ = ironcoreCache.Start(ctx) }()
	factory.WaitForCacheSync(ctx.Done())
	if !ironcoreCache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the IronCore cache did not sync")
	}
	return t, nil
}

func onAddOrUpdate(handle func(obj any)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }}
}

// networkInterfaceChanged marks a Node's route done once its pod CIDR is a prefix of its
// NetworkInterface.
func (t *tracker) networkInterfaceChanged(obj any) {
	nic, ok := obj.(*networkingv1alpha1.NetworkInterface)
	if !ok || nic.Spec.MachineRef == nil {
		return
	}
	var machineIndex int
	if _, err := fmt.Sscanf(nic.Spec.MachineRef.Name, "node-%d", &machineIndex); err != nil {
		return
	}
	want := netip.MustParsePrefix(podCIDR(machineIndex))
	if slices.ContainsFunc(nic.Spec.Prefixes, func(source networkingv1alpha1.PrefixSource) bool {
		return source.Value != nil && source.Value.Prefix == want
	}) {
		t.done(routeKey(nic.Spec.MachineRef.Name))
	}
}

// loadBalancerChanged learns which Service a LoadBalancer serves from the owner annotations
// both this CCM and the reference CCM write, so that a CCM naming LoadBalancers differently is
// measured too. Its routing may have reached every Node before this is known.
func (t *tracker) loadBalancerChanged(obj any) {
	lb, ok := obj.(*networkingv1alpha1.LoadBalancer)
	if !ok || lb.Annotations[keys.AnnotationServiceNamespace] != metav1.NamespaceDefault || lb.Annotations[keys.AnnotationServiceName] == "" {
		return
	}
	service := lb.Annotations[keys.AnnotationServiceName]
	t.done(lbCreatedKey(service))
	if len(lb.Status.IPs) > 0 {
		t.done(lbAddressKey(service))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.serviceOf[lb.Name] = service
	t.loadBalancerOf[service] = lb.Name
	t.routingProgress(lb.Name, time.Now())
}

// routingChanged records how many Nodes a LoadBalancerRouting reaches. Its Service's traffic
// reaches a Node once it holds one, and any Node it is sent to once it holds every one.
func (t *tracker) routingChanged(obj any) {
	routing, ok := obj.(*networkingv1alpha1.LoadBalancerRouting)
	if !ok {
		return
	}
	now := time.Now()
	nics := reachedNICs(routing.Destinations, t.targets)
	reaching := len(nics)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reaching[routing.Name] = reaching
	included := t.includedAt[routing.Name]
	if included == nil {
		included = map[string]time.Time{}
		t.includedAt[routing.Name] = included
	}
	for nic := range nics {
		if _, seen := included[nic]; !seen {
			included[nic] = now
		}
	}
	if _, seen := t.firstAt[routing.Name]; !seen && reaching > 0 {
		t.firstAt[routing.Name] = now
	}
	if _, seen := t.routedAt[routing.Name]; !seen && reaching >= t.nodes {
		t.routedAt[routing.Name] = now
	}
	t.routingProgress(routing.Name, now)
}

// routingProgress stops the clocks of the routing's Service, once known, at the times its
// routing was first seen reaching a Node and every Node. t.mu is held.
func (t *tracker) routingProgress(routing string, now time.Time) {
	service, known := t.serviceOf[routing]
	if !known {
		return
	}
	if at, ok := t.firstAt[routing]; ok {
		t.doneAt(lbFirstKey(service), at)
	}
	if at, ok := t.routedAt[routing]; ok {
		t.doneAt(lbRoutingKey(service), at)
	}
	t.checkNowhere(service, now)
}

// checkNowhere starts or ends a stretch in which the Service shows an address while its
// routing reaches no Node. t.mu is held.
func (t *tracker) checkNowhere(service string, now time.Time) {
	lb, known := t.loadBalancerOf[service]
	nowhere := t.addressed[service] && (!known || t.reaching[lb] == 0)
	since, open := t.nowhereSince[service]
	switch {
	case nowhere && !open:
		t.nowhereSince[service] = now
	case !nowhere && open:
		t.nowhereLongest[service] = max(t.nowhereLongest[service], now.Sub(since))
		delete(t.nowhereSince, service)
	}
}

// addressesLeadingNowhere ends the open stretches at now and sums them all up.
func (t *tracker) addressesLeadingNowhere(now time.Time) Nowhere {
	t.mu.Lock()
	defer t.mu.Unlock()
	for service, since := range t.nowhereSince {
		t.nowhereLongest[service] = max(t.nowhereLongest[service], now.Sub(since))
		delete(t.nowhereSince, service)
	}
	var result Nowhere
	for _, longest := range t.nowhereLongest {
		result.Services++
		if longest > nowhereTolerance {
			result.Longer++
		}
		result.Max = max(result.Max, newSeconds(longest))
	}
	return result
}

// targetsOf maps the name and every address of each NetworkInterface to its name.
func targetsOf(nics []networkingv1alpha1.NetworkInterface) map[string]string {
	targets := map[string]string{}
	for _, nic := range nics {
		targets[nic.Name] = nic.Name
		for _, ip := range nic.Status.IPs {
			targets[ip.String()] = nic.Name
		}
	}
	return targets
}

// reached counts the NetworkInterfaces among targets that the destinations reach.
func reached(destinations []networkingv1alpha1.LoadBalancerDestination, targets map[string]string) int {
	return len(reachedNICs(destinations, targets))
}

// reachedNICs names the NetworkInterfaces among targets that the destinations reach, by the
// destination's target name or, for a destination without one, its address.
func reachedNICs(destinations []networkingv1alpha1.LoadBalancerDestination, targets map[string]string) map[string]bool {
	seen := map[string]bool{}
	for _, destination := range destinations {
		nic, ok := "", false
		if destination.TargetRef != nil {
			nic, ok = targets[destination.TargetRef.Name]
		}
		if !ok && destination.IP.IsValid() {
			nic, ok = targets[destination.IP.String()]
		}
		if ok {
			seen[nic] = true
		}
	}
	return seen
}

// wait blocks until everything is done, reporting progress every ten seconds.
func (t *tracker) wait(ctx context.Context, timeout time.Duration, out io.Writer) error {
	return t.stopwatch.wait(ctx, timeout, out, t.progress)
}

// waitAtMost waits until everything is done or timeout comes, and says which.
func (t *tracker) waitAtMost(ctx context.Context, timeout time.Duration, out io.Writer) (bool, error) {
	return t.stopwatch.waitAtMost(ctx, timeout, out, t.progress)
}

func (t *tracker) progress() string {
	return fmt.Sprintf("Nodes initialized %d/%d, Services with addresses %d/%d, routes %d/%d, load balancer routings reaching a Node %d/%d, every Node %d/%d",
		t.count("node/"), t.nodes, t.count("service/"), t.services, t.count("route/"), t.nodes, t.count("lbfirst/"), t.services, t.count("lbrouting/"), t.services)
}

// unfinished counts what is not done yet.
func (t *tracker) unfinished() *Unfinished {
	return &Unfinished{
		Nodes: t.nodes - t.count("node/"), Addresses: t.services - t.count("service/"), Routes: t.nodes - t.count("route/"),
		WithoutDestination: t.services - t.count("lbfirst/"), Incomplete: t.services - t.count("lbrouting/"),
	}
}

// fill writes the timings into the result.
func (t *tracker) fill(result *Result) {
	result.NodeInitialization = newTimings(t.durations("node/"))
	result.LoadBalancerReadiness = newTimings(t.durations("service/"))
	result.RouteConvergence = newTimings(t.durations("route/"))
	result.RoutingComplete = newTimings(t.durations("lbrouting/"))
	result.LoadBalancerTaken = newTimings(t.durations("lbtaken/"))
	result.LoadBalancerCreated = newTimings(t.durations("lbcreated/"))
	result.LoadBalancerAddress = newTimings(t.durations("lbaddress/"))
	result.ReadyBeforeRouted = readinessLag(t.doneTimes("service/"), t.doneTimes("lbrouting/"))
	result.FirstDestination = newTimings(t.durations("lbfirst/"))
	result.FirstTraffic = newTimings(firstTraffic(t.stopwatch, "service/", "lbfirst/"))
	result.AddressWithoutDestination = t.addressesLeadingNowhere(time.Now())
	result.EligibleToRouted, result.RoutedBeforeEligible = t.followsEligibility()
}

// eligibleTolerance is how much sooner than this run's watch of the Nodes the CCM's own may
// show a Node eligible: a destination added within it is not counted as added early.
const eligibleTolerance = 500 * time.Millisecond

// followsEligibility times, per Service, how long its routing took to hold each Node once the
// Node was eligible (initialized and Ready) and the Service existed, the longest of its Nodes;
// and counts the destinations a routing held before their Node was eligible.
func (t *tracker) followsEligibility() (Timings, int) {
	created := t.startTimes("service/")
	t.mu.Lock()
	defer t.mu.Unlock()
	var lags []time.Duration
	early := 0
	for routing, included := range t.includedAt {
		service, known := t.serviceOf[routing]
		start, ok := created[service]
		if !known || !ok {
			continue
		}
		var longest time.Duration
		for nic, at := range included {
			eligible, ok := t.eligibleAt[t.nodeOfNIC[nic]]
			if !ok || at.Before(eligible.Add(-eligibleTolerance)) {
				early++
				continue
			}
			longest = max(longest, at.Sub(later(eligible, start)))
		}
		lags = append(lags, longest)
	}
	slices.Sort(lags)
	return newTimings(lags), early
}
