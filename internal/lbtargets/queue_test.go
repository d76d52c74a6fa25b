package lbtargets

import (
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// firsts is a set of keys that wait for their first traffic, safe to change while the
// workqueue reads it.
type firsts struct {
	mu   sync.Mutex
	keys map[key]bool
}

func (f *firsts) set(k key, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[k] = first
}

func (f *firsts) first(k key) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[k]
}

// drain takes every key the queue holds, in the order it hands them out.
func drain(q workqueue.TypedInterface[key]) []key {
	var got []key
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
		got = append(got, k)
	}
	return got
}

func TestRoutingsWaitingForFirstTrafficGoFirst(t *testing.T) {
	r := routingKey
	f := &firsts{keys: map[key]bool{r("new-1"): true, r("new-2"): true}}
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[key]{Queue: newFirstQueue(f.first)})
	defer q.ShutDown()
	for _, k := range []key{r("old-1"), {kind: nodeKind, name: "a"}, r("new-1"), r("old-2"), r("new-2"), r("old-3")} {
		q.Add(k)
	}
	// A waiting key whose Service came to wait for its first traffic moves ahead when it is
	// queued again; one queued again that does not wait stays where it is.
	f.set(r("old-2"), true)
	q.Add(r("old-2"))
	q.Add(r("old-1"))
	want := []key{r("new-1"), r("new-2"), r("old-2"), r("old-1"), {kind: nodeKind, name: "a"}, r("old-3")}
	if got := drain(q); !slices.Equal(got, want) {
		t.Fatalf("keys handed out in the order %v, want %v", got, want)
	}
}

func TestAKeyQueuedWhileSyncedIsJudgedWhenItsSyncEnds(t *testing.T) {
	r := routingKey
	f := &firsts{keys: map[key]bool{}}
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[key]{Queue: newFirstQueue(f.first)})
	defer q.ShutDown()
	q.Add(r("s"))
	k, _ := q.Get()
	// Added while its sync runs: queued once its sync ends, not beside it, and judged then.
	f.set(r("s"), true)
	q.Add(r("s"))
	q.Add(r("other"))
	if q.Len() != 1 {
		t.Fatalf("%d keys wait while s is synced, want 1 (other)", q.Len())
	}
	q.Done(k)
	if got, want := drain(q), []key{r("s"), r("other")}; !slices.Equal(got, want) {
		t.Fatalf("keys handed out in the order %v, want %v", got, want)
	}
}

// TestAServiceWithoutAnAddressOrADestinationWaitsForItsFirstTraffic: the order is judged from
// what the Service handlers and the routing syncs recorded, not from a lister.
func TestAServiceWithoutAnAddressOrADestinationWaitsForItsFirstTraffic(t *testing.T) {
	service := func(name string, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	c, _ := newUnstarted(t)
	for _, s := range []*corev1.Service{service("new"), service("served", corev1.LoadBalancerIngress{IP: "192.0.2.1"}),
		service("routed"), service("unrouted"), service("addressed")} {
		c.recordAddress(s)
	}
	// A Service of another type waits for no traffic of ours.
	clusterIP := service("cluster-ip")
	clusterIP.Spec.Type = corev1.ServiceTypeClusterIP
	c.recordAddress(clusterIP)
	// An address given later takes a Service out of the first ones.
	c.recordAddress(service("addressed", corev1.LoadBalancerIngress{IP: "192.0.2.2"}))
	// A routing that holds a destination already waits only for its address, which IronCore gives.
	c.routing.reaching.Store("ns/routed", true)
	c.routing.reaching.Store("ns/unrouted", true)
	c.forgetRoutingKey("ns/unrouted")
	c.recordAddress(service("unrouted"))
	for k, want := range map[key]bool{
		routingKey("ns/new"): true, routingKey("ns/served"): false, routingKey("ns/gone"): false,
		routingKey("ns/routed"): false, routingKey("ns/unrouted"): true, routingKey("ns/addressed"): false, routingKey("ns/cluster-ip"): false,
		{kind: nodeKind, name: "ns/new"}: false, {kind: verifyKind, name: "ns/new"}: false,
	} {
		if got := c.waitsForFirstTraffic(k); got != want {
			t.Errorf("waitsForFirstTraffic(%v) = %v, want %v", k, got, want)
		}
	}
}

// A key names itself in logs by what it stands for, not as a struct of numbers.
func TestAKeyNamesItsKindAndName(t *testing.T) {
	for _, c := range []struct {
		key  key
		want string
	}{
		{routingKey("shop/web"), "routing shop/web"},
		{key{kind: labelsKind}, "labels"},
		{key{kind: verifyKind, name: "shop/web", attempt: 2}, "verify shop/web (attempt 2)"},
		{key{kind: graceEndKind, name: "node-1"}, "grace end node-1"},
		{key{kind: 99}, "kind 99"},
	} {
		if got := c.key.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.key, got, c.want)
		}
	}
}
