package provider

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeListsGatherForTheRunningSync: label syncs that arrive while one runs leave their
// Nodes to it; a later call may carry an older list, which must not drop a Node an earlier
// call brought.
func TestNodeListsGatherForTheRunningSync(t *testing.T) {
	n := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	pending := mergeNodes(mergeNodes(nil, []*corev1.Node{n("a"), n("joined")}), []*corev1.Node{n("a")})
	if len(pending) != 2 || pending["joined"] == nil {
		t.Fatalf("pending Nodes %v, want a and joined", pending)
	}
}
