package lbtargets

import (
	"context"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// TestADeletedLoadBalancerIsForgotten: the routing written, the digest nudged and the selector's
// settling time recorded for a LoadBalancer go with it; another's stay.
func TestADeletedLoadBalancerIsForgotten(t *testing.T) {
	c, _ := newUnstarted(t)
	c.routing.written = map[types.UID]writtenRouting{"deleted": {}, "kept": {}}
	c.labels.nudged = map[types.UID]writtenDigest{"deleted": {}, "kept": {}}
	c.moves.request("deleted", &metav1.LabelSelector{})
	c.loadBalancerDeleted(&networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Name: "lb", UID: "deleted"}})
	_, settling := c.moves.get("deleted")
	_, written := c.routing.written["deleted"]
	_, nudged := c.labels.nudged["deleted"]
	if settling || written || nudged {
		t.Errorf("still recorded of the deleted LoadBalancer: settling %v, routing written %v, digest nudged %v", settling, written, nudged)
	}
	if len(c.routing.written) != 1 || len(c.labels.nudged) != 1 {
		t.Errorf("%d routings, %d digests recorded; want the other LoadBalancer's", len(c.routing.written), len(c.labels.nudged))
	}
}

// TestADeletedServiceIsForgotten: a deleted Service's request, report, verify mark, destinations
// mark, events and target count are dropped at once, and its key queued, whose sync drops what a
// sync under way recorded again; a request of a newer Service of the name is kept.
func TestADeletedServiceIsForgotten(t *testing.T) {
	metrics.Register() // unregistered, the target count is never exported
	c, _ := newUnstarted(t)
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "forget", UID: "old"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	key := serviceName("ns", "forget")
	record := func(request bool) {
		if request {
			c.Request(service, false)
		}
		c.routing.mu.Lock()
		c.routing.reports = map[string]targetsapi.Report{key: {Targets: 1}}
		c.routing.mu.Unlock()
		c.markVerify(key)
		c.routing.reaching.Store(key, true)
		c.recordAddress(service)
		c.notices.Changed(service.UID, targetsapi.ReasonTargetsIncomplete, "some Nodes skipped")
	}
	record(true)
	c.serviceDeleted(service)
	if n := c.RoutingKeysRemembered("ns", "forget"); n != 0 {
		t.Errorf("%d routing keys remembered after the Service's deletion, want 0", n)
	}
	if n := c.notices.Remembered(); n != 0 {
		t.Errorf("events of %d Services remembered after the Service's deletion", n)
	}
	if metrics.LoadBalancerTargets.DeleteLabelValues("ns", "forget") {
		t.Error("the Service's target count is still exported")
	}

	// A sync under way records it all again; the key's next sync finds the Service gone.
	record(false)
	for c.queue.Len() > 0 {
		queued, _ := c.queue.Get()
		if err := c.sync(context.Background(), queued); err != nil {
			t.Fatal(err)
		}
		c.queue.Done(queued)
	}
	if n := c.RoutingKeysRemembered("ns", "forget"); n != 0 {
		t.Errorf("%d routing keys remembered after the key's sync, want 0", n)
	}

	newer := service.DeepCopy()
	newer.UID = "new"
	c.Request(newer, false)
	c.serviceDeleted(service)
	if _, ok := c.routing.requests[key]; !ok {
		t.Error("the deletion of a Service dropped the request of a newer one of its name")
	}
}

// TestADeletedNodeIsNoLongerRememberedAsLeftOut: the record that a Node was logged as no
// target goes with the Node, also when a sync under way logs it after its deletion was handled.
func TestADeletedNodeIsNoLongerRememberedAsLeftOut(t *testing.T) {
	c, stores := newUnstarted(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}
	if err := stores.nodes.Add(node); err != nil {
		t.Fatal(err)
	}
	c.logLeftOut(node, "provider ID of another cloud")
	if _, ok := c.leftOut.Load("gone"); !ok {
		t.Fatal("a Node logged as no target is not remembered as such")
	}
	if err := stores.nodes.Delete(node); err != nil {
		t.Fatal(err)
	}
	if err := c.syncNode(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.leftOut.Load("gone"); ok {
		t.Error("a deleted Node is still remembered as left out")
	}

	c.logLeftOut(node, "provider ID of another cloud")
	if _, ok := c.leftOut.Load("gone"); ok {
		t.Error("a Node logged after its deletion was handled is remembered as left out")
	}
}

// TestAReportAfterTheServiceStoppedWantingALoadBalancerRecordsNothing: a sync or request that
// began while the Service was of type LoadBalancer and reports after the lister shows it
// turned ClusterIP leaves neither events nor a target count behind.
func TestAReportAfterTheServiceStoppedWantingALoadBalancerRecordsNothing(t *testing.T) {
	metrics.Register() // unregistered, the target count is never exported
	c, stores := newUnstarted(t)
	before := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "turned", UID: "uid"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	after := before.DeepCopy()
	after.Spec.Type = corev1.ServiceTypeClusterIP
	if err := stores.services.Add(after); err != nil {
		t.Fatal(err)
	}
	c.report(before, targetsapi.Report{Targets: 2, Skipped: targetsapi.Skipped{"Node a: no Machine"}})
	if n := c.notices.Remembered(); n != 0 {
		t.Errorf("events of %d Services remembered", n)
	}
	if metrics.LoadBalancerTargets.DeleteLabelValues("ns", "turned") {
		t.Error("the Service's target count is exported")
	}
}
