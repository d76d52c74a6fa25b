package bench

import (
	"io"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStartupLookupFault: a replica whose framework start-up could not read the authentication
// configuration through a fault the target API injected (a 500, a reset stream) ended as the
// run means it to; any other end of it is a problem.
func TestStartupLookupFault(t *testing.T) {
	for _, tc := range []struct {
		last string
		want bool
	}{
		{`unable to load configmap based request-header-client-ca-file: ... injected failure`, true},
		{`unable to load configmap based request-header-client-ca-file: Get "https://127.0.0.1:45363/...": stream error: stream ID 1; INTERNAL_ERROR; received from peer`, true},
		{`unable to load configmap based request-header-client-ca-file: configmaps "extension-apiserver-authentication" is forbidden`, false},
		{`panic: runtime error: invalid memory address`, false},
	} {
		if got := startupLookupFault(tc.last); got != tc.want {
			t.Errorf("startupLookupFault(%q) = %v, want %v", tc.last, got, tc.want)
		}
	}
}

// TestCheckServingBounds: a Node that cannot serve must leave the routings the CCM writes within
// unservableBound (plus routingWrite per such routing) of calm time, and in selector mode lose
// its target label within unservableBound; a routing IronCore computes from the labels is held
// only to targetBound, as its one LoadBalancer worker sets that pace.
func TestCheckServingBounds(t *testing.T) {
	const nic = "node-0001-primary"
	routing := func(name string) networkingv1alpha1.LoadBalancerRouting {
		return networkingv1alpha1.LoadBalancerRouting{
			ObjectMeta:   metav1.ObjectMeta{Name: name},
			Destinations: []networkingv1alpha1.LoadBalancerDestination{{TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{Name: nic}}},
		}
	}
	for _, tc := range []struct {
		name      string
		selecting bool
		local     bool
		labelled  bool
		since     time.Duration
		want      int
	}{
		{name: "default mode, within the bound", since: time.Second},
		{name: "default mode, past the bound", since: 3 * time.Second, want: 1},
		{name: "selector mode, IronCore's routing, label gone", selecting: true, since: 30 * time.Second},
		{name: "selector mode, IronCore's routing, past targetBound", selecting: true, since: targetBound + time.Second, want: 1},
		{name: "selector mode, label kept past the bound", selecting: true, labelled: true, since: 3 * time.Second, want: 1},
		{name: "selector mode, label kept within the bound", selecting: true, labelled: true, since: time.Second},
		{name: "selector mode, a Local Service's routing past the bound", selecting: true, local: true, since: 3 * time.Second, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			state := &chaosService{service: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, local: tc.local, endpoints: []string{"node-0002"}}
			c := &chaos{opts: ChaosOptions{Selecting: tc.selecting, Progress: io.Discard}, result: &ChaosResult{},
				services: map[string]*chaosService{"s": state}, byLoadBalancer: map[string]*chaosService{"lb": state},
				present: map[string]bool{"node-0002": true}, excused: map[string]bool{}, labelled: map[string]bool{nic: tc.labelled},
				unservable:     map[string]map[string]time.Time{nic: {"its Machine deleted": now.Add(-tc.since)}},
				unservableHeld: map[string]bool{}}
			c.checkServing([]networkingv1alpha1.LoadBalancerRouting{routing("lb")}, now)
			if c.result.UnservableHeld != tc.want {
				t.Errorf("%d held past the bound (%v), want %d", c.result.UnservableHeld, c.result.Problems, tc.want)
			}
		})
	}
}
