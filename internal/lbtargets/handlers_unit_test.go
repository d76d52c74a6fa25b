package lbtargets

import (
	"context"
	"slices"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// stores hold what the listers of a controller of newUnstarted show.
type stores struct {
	nodes, services toolscache.Indexer
}

// newUnstarted builds a controller whose listers show what the test puts in their stores,
// without handlers, informers or IronCore, for tests of its records and handlers.
func newUnstarted(t *testing.T) (*Controller, stores) {
	t.Helper()
	s := stores{
		nodes:    toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
		services: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
	}
	endpointSlices := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	c := newController(Config{}, listers{
		nodes: corelisters.NewNodeLister(s.nodes), services: corelisters.NewServiceLister(s.services),
		endpointSlices: discoverylisters.NewEndpointSliceLister(endpointSlices), endpointSlicesSynced: func() bool { return true },
	})
	t.Cleanup(c.queue.ShutDown)
	return c, s
}

// queued takes every key the queue holds now, in order.
func queued(c *Controller) []key {
	var keys []key
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Done(k)
		keys = append(keys, k)
	}
	return keys
}

// TestAServiceChangeQueuesItsRoutingOnlyWhenItsTargetsMayChange: turning Local or back, and
// ceasing to want a load balancer (which also drops its events), queue the Service's routing;
// any other change does not.
func TestAServiceChangeQueuesItsRoutingOnlyWhenItsTargetsMayChange(t *testing.T) {
	base := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, tc := range []struct {
		name         string
		change       func(*corev1.Service)
		queues       bool
		eventsKept   bool
		firstTraffic bool
	}{
		{"an annotation", func(s *corev1.Service) { s.Annotations = map[string]string{"example.org/x": "y"} }, false, true, true},
		{"turned Local", func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }, true, true, true},
		{"turned ClusterIP", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP }, true, false, false},
		{"shows an address", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}
		}, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newUnstarted(t)
			c.recordAddress(base) // as its add does
			c.notices.Changed(base.UID, targetsapi.ReasonTargetsIncomplete, "some Nodes skipped")
			changed := base.DeepCopy()
			tc.change(changed)
			c.serviceChanged(base, changed)
			want := []key(nil)
			if tc.queues {
				want = []key{routingKey("ns/web")}
			}
			if got := queued(c); !slices.Equal(got, want) {
				t.Errorf("queued %v, want %v", got, want)
			}
			if kept := c.notices.Remembered() == 1; kept != tc.eventsKept {
				t.Errorf("events kept: %t, want %t", kept, tc.eventsKept)
			}
			if first := c.waitsForFirstTraffic(routingKey("ns/web")); first != tc.firstTraffic {
				t.Errorf("waits for its first traffic: %t, want %t", first, tc.firstTraffic)
			}
		})
	}
}

// TestALoadBalancerThatStopsSelectingIsComparedWithIronCoreSoon: when a LoadBalancer stops
// selecting, what was recorded of its routing is dropped, its routing synced at once and
// compared with IronCore's at each recheck delay; a change that keeps its selector only syncs
// the routing.
func TestALoadBalancerThatStopsSelectingIsComparedWithIronCoreSoon(t *testing.T) {
	selecting := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Name: "lb", UID: "lb-uid", Annotations: map[string]string{
			keys.AnnotationServiceNamespace: "ns", keys.AnnotationServiceName: "web"}},
		Spec: networkingv1alpha1.LoadBalancerSpec{NetworkInterfaceSelector: &metav1.LabelSelector{}},
	}
	for _, tc := range []struct {
		name        string
		change      func(*networkingv1alpha1.LoadBalancer)
		forgets     bool
		verifyTimes int
	}{
		{"a port added", func(lb *networkingv1alpha1.LoadBalancer) {
			lb.Spec.Ports = []networkingv1alpha1.LoadBalancerPort{{Port: 443}}
		}, false, 0},
		{"the selector removed", func(lb *networkingv1alpha1.LoadBalancer) { lb.Spec.NetworkInterfaceSelector = nil }, true, len(recheckDelays())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newUnstarted(t)
			clock := testingclock.NewFakeClock(time.Now())
			c.queue = c.newQueue(clock)
			t.Cleanup(c.queue.ShutDown)
			c.routing.written = map[types.UID]writtenRouting{selecting.UID: {}}
			changed := selecting.DeepCopy()
			tc.change(changed)
			c.loadBalancerChanged(selecting, changed)
			if got, want := queued(c), []key{routingKey("ns/web")}; !slices.Equal(got, want) {
				t.Errorf("queued %v at once, want %v", got, want)
			}
			if _, kept := c.routing.written[selecting.UID]; kept == tc.forgets {
				t.Errorf("the routing written is still recorded: %t, want %t", kept, !tc.forgets)
			}
			var verified []key
			for _, delay := range recheckDelays() {
				clock.Step(delay)
				// The delaying queue hands a key over in its own goroutine once the clock passes.
				_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
					return c.queue.Len() > 0 || len(verified) >= tc.verifyTimes, nil
				})
				verified = append(verified, queued(c)...)
			}
			if len(verified) != tc.verifyTimes {
				t.Errorf("verify keys %v over %v, want %d", verified, recheckDelays(), tc.verifyTimes)
			}
			for _, k := range verified {
				if k.kind != verifyKind || k.name != "ns/web" {
					t.Errorf("queued %v later, want only the Service's verify keys", k)
				}
			}
		})
	}
}
