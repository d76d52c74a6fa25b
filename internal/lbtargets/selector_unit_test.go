package lbtargets

import (
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestASelectorMovesOnlyOnAFreshCheck: once the settling time has passed since the targets were
// first found labelled, the selector moves only on a check that began after it: a check found
// before may be a retry interval old, and a target added since would be dropped.
func TestASelectorMovesOnlyOnAFreshCheck(t *testing.T) {
	c, _ := newUnstarted(t)
	old := &metav1.LabelSelector{MatchLabels: map[string]string{"old": "x"}}
	next := &metav1.LabelSelector{MatchLabels: map[string]string{"new": "x"}}
	existing := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Name: "lb", UID: "uid"},
		Spec: networkingv1alpha1.LoadBalancerSpec{NetworkInterfaceSelector: old}}
	hold := func() bool {
		desired := existing.DeepCopy()
		desired.Spec.NetworkInterfaceSelector = next.DeepCopy()
		held, _ := c.HoldSelector(existing, desired)
		return held
	}
	if !hold() {
		t.Fatal("the selector moved before any check")
	}
	labelledSince := time.Now().Add(-2 * selectorSettle)
	c.moves.checked(existing.UID, next, true, labelledSince)
	if !hold() {
		t.Fatal("the selector moved on a check that began before the settling time ended")
	}
	c.moves.checked(existing.UID, next, true, time.Now())
	if hold() {
		t.Fatal("the selector stayed after a fresh check found every target labelled")
	}
	if !hold() {
		t.Fatal("a new move began settled")
	}
	c.moves.checked(existing.UID, next, true, labelledSince)
	c.moves.checked(existing.UID, next, false, time.Now())
	c.moves.checked(existing.UID, next, true, time.Now())
	if !hold() {
		t.Fatal("the selector moved though a check found a target unlabelled within the settling time")
	}
}
