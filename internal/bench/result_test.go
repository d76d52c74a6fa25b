package bench

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

func TestNewTimingsTakesNearestRankQuantiles(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 20; i++ {
		sorted = append(sorted, time.Duration(i)*time.Second)
	}
	got := newTimings(sorted)
	if got.Count != 20 || got.P50 != 10 || got.P95 != 19 || got.Max != 20 || len(got.All) != 20 {
		t.Errorf("got count %d, p50 %v, p95 %v, max %v, %d values; want 20, 10, 19, 20, 20", got.Count, got.P50, got.P95, got.Max, len(got.All))
	}
	if empty := newTimings(nil); empty.Count != 0 || empty.Max != 0 {
		t.Errorf("no durations: %+v", empty)
	}
}

func TestNewRatioDividesServicesByFloor(t *testing.T) {
	got := newRatio(Timings{P50: 3, Max: 10}, Timings{P50: 1.5, Max: 3})
	if want := (Ratio{P50: 2, Max: 3.33}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := newRatio(Timings{P50: 3, Max: 10}, Timings{}); got != (Ratio{}) {
		t.Errorf("an empty floor gives %+v, want zero", got)
	}
}

func TestReadinessLagCountsServicesReadyBeforeRouted(t *testing.T) {
	start := time.Now()
	at := func(seconds float64) time.Time { return start.Add(time.Duration(seconds * float64(time.Second))) }
	ready := map[string]time.Time{"early": at(1), "late": at(5), "equal": at(2), "unrouted": at(1)}
	routed := map[string]time.Time{"early": at(3.5), "late": at(4), "equal": at(2), "unready": at(9)}
	if got, want := readinessLag(ready, routed), (Lag{Services: 1, Max: 2.5}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := readinessLag(ready, nil); got != (Lag{}) {
		t.Errorf("nothing routed gives %+v, want zero", got)
	}
}

func TestAttributeDividesRequestsAmongNodesAndServices(t *testing.T) {
	requests := Requests{Convergence: []RequestCount{
		{Verb: "patch", Resource: "networkinterfaces.networking.ironcore.dev", Count: 30},
		{Verb: "patch", Resource: "machines.compute.ironcore.dev", Count: 10},
		{Verb: "update", Resource: "machines.compute.ironcore.dev/status", Count: 2},
		{Verb: "watch", Resource: "machines.compute.ironcore.dev", Count: 1},
		{Verb: "get", Resource: "loadbalancers.networking.ironcore.dev", Count: 3, Refused: 3},
		{Verb: "patch", Resource: "loadbalancers.networking.ironcore.dev", Count: 3},
		{Verb: "watch", Resource: "loadbalancerroutings.networking.ironcore.dev", Count: 1},
		{Verb: "GET", Resource: "/apis", Count: 1},
	}}
	requests.attribute(10, 3)
	if requests.WritesPerNode != 4.2 || requests.RequestsPerService != 2.33 {
		t.Errorf("writes per Node %v, requests per Service %v; want 4.2, 2.33", requests.WritesPerNode, requests.RequestsPerService)
	}
	if got := total(requests.Convergence, true); got != 45 {
		t.Errorf("writes %d, want 45 (discovery GETs are reads)", got)
	}
	requests.attribute(0, 0)
	if requests.WritesPerNode != 0 || requests.RequestsPerService != 0 {
		t.Errorf("no objects: %v, %v; want 0, 0", requests.WritesPerNode, requests.RequestsPerService)
	}
}

func TestPluralNameDropsGroupAndSubresource(t *testing.T) {
	for resource, want := range map[string]string{
		"machines.compute.ironcore.dev/status":         "machines",
		"loadbalancerroutings.networking.ironcore.dev": "loadbalancerroutings",
		"nodes": "nodes",
		"/api":  "",
	} {
		if got := pluralName(resource); got != want {
			t.Errorf("pluralName(%q) = %q, want %q", resource, got, want)
		}
	}
}

func TestWarningEventsCountsTheBurstsObjectsByReason(t *testing.T) {
	event := func(kind, namespace, name, eventType, reason string, count int32) corev1.Event {
		return corev1.Event{
			InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: namespace, Name: name},
			Type:           eventType, Reason: reason, Count: count,
		}
	}
	seriesEvent := event("Service", "default", "svc-0001", corev1.EventTypeWarning, "SyncLoadBalancerFailed", 0)
	seriesEvent.Series = &corev1.EventSeries{Count: 4}
	events := []corev1.Event{
		event("Service", "default", "svc-0000", corev1.EventTypeWarning, "SyncLoadBalancerFailed", 3),
		seriesEvent,
		event("Service", "default", "svc-0000", corev1.EventTypeNormal, "EnsuringLoadBalancer", 5),
		event("Service", "other", "svc-0000", corev1.EventTypeWarning, "SyncLoadBalancerFailed", 1),
		event("Service", "default", "svc-9999", corev1.EventTypeWarning, "SyncLoadBalancerFailed", 1),
		event("Node", "default", "node-0000", corev1.EventTypeWarning, "NodeNotFound", 0),
	}
	burst := map[corev1.ObjectReference]bool{
		{Kind: "Service", Namespace: "default", Name: "svc-0000"}: true,
		{Kind: "Service", Namespace: "default", Name: "svc-0001"}: true,
		{Kind: "Node", Name: "node-0000"}:                         true,
	}
	want := WarningEvents{Events: 3, Occurrences: 8, ByReason: []ReasonCount{
		{Kind: "Service", Reason: "SyncLoadBalancerFailed", Objects: 2, Events: 2, Occurrences: 7},
		{Kind: "Node", Reason: "NodeNotFound", Objects: 1, Events: 1, Occurrences: 1},
	}}
	if got := warningEvents(events, burst); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestReachedCountsNetworkInterfacesByNameOrAddress(t *testing.T) {
	nic := func(name, ip string) networkingv1alpha1.NetworkInterface {
		n := networkingv1alpha1.NetworkInterface{}
		n.Name = name
		n.Status.IPs = []commonv1alpha1.IP{{Addr: netip.MustParseAddr(ip)}}
		return n
	}
	targets := targetsOf([]networkingv1alpha1.NetworkInterface{nic("a", "10.0.0.1"), nic("b", "10.0.0.2"), nic("c", "10.0.0.3")})
	destination := func(name, ip string) networkingv1alpha1.LoadBalancerDestination {
		d := networkingv1alpha1.LoadBalancerDestination{IP: commonv1alpha1.IP{Addr: netip.MustParseAddr(ip)}}
		if name != "" {
			d.TargetRef = &networkingv1alpha1.LoadBalancerTargetRef{Name: name}
		}
		return d
	}
	destinations := []networkingv1alpha1.LoadBalancerDestination{
		destination("a", "10.0.0.1"),
		destination("a", "10.0.0.1"),     // a twice is one
		destination("", "10.0.0.2"),      // b by address
		destination("x", "10.9.9.9"),     // not a Node's
		destination("other", "10.0.0.3"), // c by address, under an unknown name
	}
	if got := reached(destinations, targets); got != 3 {
		t.Errorf("reached %d, want 3", got)
	}
	if got := reached(nil, targets); got != 0 {
		t.Errorf("no destinations reached %d", got)
	}
}

func TestStopwatchSignalsWhenEveryCreatedKeyIsDone(t *testing.T) {
	s := newStopwatch(2)
	s.created("a/1")
	s.created("a/2")
	s.done("b/1") // not created: ignored
	s.done("a/1")
	select {
	case <-s.allDone:
		t.Fatal("done after one of two")
	default:
	}
	first := s.doneTimes("a/")["1"]
	s.doneAt("a/1", first.Add(time.Hour)) // only the first time counts
	s.done("a/2")
	select {
	case <-s.allDone:
	default:
		t.Fatal("not done after both")
	}
	if got := s.doneTimes("a/")["1"]; !got.Equal(first) {
		t.Errorf("a/1 done at %v, then %v", first, got)
	}
	if s.count("a/") != 2 || len(s.durations("a/")) != 2 || s.count("b/") != 0 {
		t.Errorf("counts a %d, b %d", s.count("a/"), s.count("b/"))
	}
	select {
	case <-newStopwatch(0).allDone:
	default:
		t.Error("a stopwatch waiting for nothing is not done")
	}
}

// TestAddressesLeadingNowhere sums up the stretches in which a Service showed an address while
// its routing reached no Node, including one still open at the end and one that recurs.
func TestAddressesLeadingNowhere(t *testing.T) {
	tr := &tracker{
		stopwatch: newStopwatch(1), nodes: 2,
		serviceOf: map[string]string{}, loadBalancerOf: map[string]string{},
		firstAt: map[string]time.Time{}, routedAt: map[string]time.Time{}, reaching: map[string]int{},
		addressed: map[string]bool{}, nowhereSince: map[string]time.Time{}, nowhereLongest: map[string]time.Duration{},
	}
	at := time.Unix(1000, 0)
	step := func(seconds int, change func()) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		change()
		for service := range tr.addressed {
			tr.checkNowhere(service, at.Add(time.Duration(seconds)*time.Second))
		}
	}
	step(0, func() { tr.serviceOf["lb-a"], tr.loadBalancerOf["a"] = "a", "lb-a"; tr.addressed["a"] = true })
	step(3, func() { tr.reaching["lb-a"] = 1 })
	step(4, func() { tr.reaching["lb-a"] = 0 })
	step(5, func() { tr.reaching["lb-a"] = 2 })
	step(6, func() { tr.addressed["b"] = true })
	step(7, func() { tr.addressed["c"] = true; tr.loadBalancerOf["c"], tr.reaching["lb-c"] = "lb-c", 1 })
	got := tr.addressesLeadingNowhere(at.Add(7500 * time.Millisecond))
	want := Nowhere{Services: 2, Longer: 1, Max: 3}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestFollowsEligibility: a routing is timed from the later of its Service's creation and each
// Node's eligibility to holding that Node, the longest per Service; a destination held before
// its Node was eligible (past the tolerance), or of a Node never eligible, counts as early.
func TestFollowsEligibility(t *testing.T) {
	s := newStopwatch(1)
	s.created("service/s")
	start := s.startTimes("service/")["s"]
	tr := &tracker{stopwatch: s,
		serviceOf: map[string]string{"r": "s"},
		nodeOfNIC: map[string]string{"n1": "node-1", "n2": "node-2", "n3": "node-3", "n4": "node-4"},
		eligibleAt: map[string]time.Time{
			"node-1": start.Add(-time.Minute),     // before the Service: timed from the Service
			"node-2": start.Add(2 * time.Second),  // after it: timed from the Node
			"node-3": start.Add(10 * time.Second), // held before it was eligible
		},
		includedAt: map[string]map[string]time.Time{"r": {
			"n1": start.Add(time.Second),
			"n2": start.Add(5 * time.Second),
			"n3": start.Add(3 * time.Second),
			"n4": start.Add(4 * time.Second), // never eligible
		}},
	}
	lags, early := tr.followsEligibility()
	if lags.Count != 1 || lags.Max != 3 {
		t.Errorf("per Service %+v, want one Service at 3s (its slowest Node)", lags)
	}
	if early != 2 {
		t.Errorf("%d destinations held early, want 2", early)
	}
}

func TestRoutingVolumeSumsTheRoutingWritesOnly(t *testing.T) {
	var requests Requests
	requests.routingVolume([]apiproxy.Write{
		{Verb: "patch", Resource: "loadbalancerroutings.networking.ironcore.dev", Bytes: 1000},
		{Verb: "create", Resource: "loadbalancerroutings.networking.ironcore.dev", Bytes: 500},
		{Verb: "patch", Resource: "loadbalancers.networking.ironcore.dev", Bytes: 4000},
		{Verb: "patch", Resource: "networkinterfaces.networking.ironcore.dev", Bytes: 300},
	}, 4)
	if requests.RoutingWrites != 2 || requests.RoutingBytes != 1500 || requests.RoutingBytesPerNode != 375 {
		t.Errorf("got %d writes, %d bytes, %v per Node; want 2, 1500, 375", requests.RoutingWrites, requests.RoutingBytes, requests.RoutingBytesPerNode)
	}
}

// The status subresource's writes are status writes unless their body is known to set metadata
// only, as the service controller's patch that adds its finalizer does; other resources do not
// count. A run that told them apart shows its status writes per Service; an older one, all its
// writes of the status subresource, as an estimate.
func TestStatusWritesAreToldFromFinalizerPatches(t *testing.T) {
	r := &Result{Services: 2}
	r.Requests.statusWrites([]apiproxy.Write{
		{Verb: "patch", Resource: "services/status", Fields: []string{"metadata"}},
		{Verb: "patch", Resource: "services/status", Fields: []string{"metadata", "status"}},
		{Verb: "patch", Resource: "services/status", Fields: []string{"status"}},
		{Verb: "update", Resource: "services/status"}, // a body of unknown fields
		{Verb: "patch", Resource: "services", Fields: []string{"status"}},
		{Verb: "patch", Resource: "nodes/status", Fields: []string{"status"}},
	})
	if r.Requests.StatusWrites != 3 || r.Requests.FinalizerPatches != 1 {
		t.Errorf("status writes %d and finalizer patches %d, want 3 and 1", r.Requests.StatusWrites, r.Requests.FinalizerPatches)
	}
	if perService, estimated := r.perService(); perService != 1.5 || estimated {
		t.Errorf("status writes per Service %.2f (estimated: %t), want 1.50, counted", perService, estimated)
	}
	older := &Result{Services: 2, Requests: Requests{Target: []RequestCount{{Verb: "patch", Resource: "services/status", Count: 5}, {Verb: "get", Resource: "services", Count: 9}}}}
	if perService, estimated := older.perService(); perService != 2.5 || !estimated {
		t.Errorf("an older run's status writes per Service %.2f (estimated: %t), want 2.50, estimated", perService, estimated)
	}
}

// Routing writes of more than a few KiB count as full routings besides the total; writes of
// other resources count as neither.
func TestFullRoutingWritesAreCountedApart(t *testing.T) {
	var r Requests
	r.routingVolume([]apiproxy.Write{
		{Resource: "loadbalancerroutings.networking.ironcore.dev", Bytes: 900},
		{Resource: "loadbalancerroutings.networking.ironcore.dev", Bytes: 150_000},
		{Resource: "loadbalancerroutings.networking.ironcore.dev", Bytes: 4096},
		{Resource: "networkinterfaces.networking.ironcore.dev", Bytes: 90_000},
	}, 1000)
	if r.RoutingWrites != 3 || r.FullRoutingWrites != 1 || r.RoutingBytes != 154_996 {
		t.Errorf("routing writes %d, full %d, bytes %d; want 3, 1, 154996", r.RoutingWrites, r.FullRoutingWrites, r.RoutingBytes)
	}
}
