package provider

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAnOlderNodeListDoesNotOverwriteANewerOne: label syncs that arrive while one runs leave
// their Nodes to it; a later call may carry an older list, which must neither drop a Node a
// newer list brought nor replace a newer version of a Node.
func TestAnOlderNodeListDoesNotOverwriteANewerOne(t *testing.T) {
	n := func(name, version, providerID string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: version}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	}
	newer := []*corev1.Node{n("a", "10", "ironcore://ns/a"), n("joined", "11", "ironcore://ns/joined")}
	older := []*corev1.Node{n("a", "5", "")}
	pending := mergeNodes(mergeNodes(nil, newer), older)
	if len(pending) != 2 || pending["joined"] == nil {
		t.Fatalf("pending Nodes %v, want a and joined", pending)
	}
	if pending["a"].Spec.ProviderID != "ironcore://ns/a" {
		t.Fatalf("Node a was replaced by an older version without its provider ID")
	}
}
