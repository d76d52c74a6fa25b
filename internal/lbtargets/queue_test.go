package lbtargets

import (
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// firsts is a set of keys that wait for their first traffic, safe to change while the
// workqueue reads it.
type firsts struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (f *firsts) set(key string, first bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[key] = first
}

func (f *firsts) first(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[key]
}

// drain takes every key the queue holds, in the order it hands them out.
func drain(q workqueue.TypedInterface[string]) []string {
	var got []string
	for q.Len() > 0 {
		key, _ := q.Get()
		q.Done(key)
		got = append(got, key)
	}
	return got
}

func TestRoutingsWaitingForFirstTrafficGoFirst(t *testing.T) {
	f := &firsts{keys: map[string]bool{"routing/new-1": true, "routing/new-2": true}}
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Queue: newFirstQueue(f.first)})
	defer q.ShutDown()
	for _, key := range []string{"routing/old-1", "node/a", "routing/new-1", "routing/old-2", "routing/new-2", "routing/old-3"} {
		q.Add(key)
	}
	// A waiting key whose Service came to wait for its first traffic moves ahead when it is
	// queued again; one queued again that does not wait stays where it is.
	f.set("routing/old-2", true)
	q.Add("routing/old-2")
	q.Add("routing/old-1")
	want := []string{"routing/new-1", "routing/new-2", "routing/old-2", "routing/old-1", "node/a", "routing/old-3"}
	if got := drain(q); !slices.Equal(got, want) {
		t.Fatalf("keys handed out in the order %v, want %v", got, want)
	}
}

func TestAKeyQueuedWhileSyncedIsJudgedWhenItsSyncEnds(t *testing.T) {
	f := &firsts{keys: map[string]bool{}}
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Queue: newFirstQueue(f.first)})
	defer q.ShutDown()
	q.Add("routing/s")
	key, _ := q.Get()
	// Added while its sync runs: queued once its sync ends, not beside it, and judged then.
	f.set("routing/s", true)
	q.Add("routing/s")
	q.Add("routing/other")
	if q.Len() != 1 {
		t.Fatalf("%d keys wait while routing/s is synced, want 1 (routing/other)", q.Len())
	}
	q.Done(key)
	if got, want := drain(q), []string{"routing/s", "routing/other"}; !slices.Equal(got, want) {
		t.Fatalf("keys handed out in the order %v, want %v", got, want)
	}
}

func TestAServiceWithoutAnAddressOrADestinationWaitsForItsFirstTraffic(t *testing.T) {
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	service := func(name string, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	for _, s := range []*corev1.Service{service("new"), service("served", corev1.LoadBalancerIngress{IP: "192.0.2.1"})} {
		if err := indexer.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*corev1.Service{service("routed"), service("unrouted")} {
		if err := indexer.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Config{})
	if c.waitsForFirstTraffic(routingPrefix + "ns/new") {
		t.Error("without a Service lister, a routing went first")
	}
	c.listers.Store(&listers{services: corelisters.NewServiceLister(indexer)})
	// A routing that holds a destination already waits only for its address, which IronCore gives.
	c.routing.reaching.Store(routingPrefix+"ns/routed", true)
	c.routing.reaching.Store(routingPrefix+"ns/unrouted", true)
	c.forgetRoutingKey(routingPrefix + "ns/unrouted")
	for key, want := range map[string]bool{
		routingPrefix + "ns/new": true, routingPrefix + "ns/served": false, routingPrefix + "ns/gone": false,
		routingPrefix + "ns/routed": false, routingPrefix + "ns/unrouted": true,
		nodePrefix + "new": false, allKey: false, routingPrefix + "a/b/c": false,
	} {
		if got := c.waitsForFirstTraffic(key); got != want {
			t.Errorf("waitsForFirstTraffic(%q) = %v, want %v", key, got, want)
		}
	}
}
