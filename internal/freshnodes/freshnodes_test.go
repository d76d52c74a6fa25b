package freshnodes_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/freshnodes"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// withStaleCache creates the named Node and wraps an informer that is never started, its store
// holding the Node as created: a cache that lags the API server for as long as the test needs.
func withStaleCache(t *testing.T, name string) (*corev1.Node, *freshnodes.Nodes, cache.Indexer) {
	t.Helper()
	created, err := stack.CreateNode(context.Background(), name, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	informer := informers.NewSharedInformerFactory(stack.TargetClientset, 0).Core().V1().Nodes()
	store := informer.Informer().GetIndexer()
	if err := store.Add(created); err != nil {
		t.Fatal(err)
	}
	nodes, err := freshnodes.New(informer, stack.TargetClientset)
	if err != nil {
		t.Fatal(err)
	}
	return created, nodes, store
}

// TestAnUpdateAfterAConflictIsMadeOnTheAPIServersCopy: another writer changes a Node after the
// cache's copy. An update of that copy conflicts, as in the upstream node controller; the
// lister's next Get reads the API server, so the retry succeeds, and it then answers with what
// the update returned until the cache shows as much.
func TestAnUpdateAfterAConflictIsMadeOnTheAPIServersCopy(t *testing.T) {
	ctx := context.Background()
	created, nodes, store := withStaleCache(t, "fresh-a")
	lister, client := nodes.Informer().Lister(), nodes.Client().CoreV1().Nodes()

	// Another writer, as the route controller's condition or the kubelet's status.
	other, err := stack.TargetClientset.CoreV1().Nodes().Patch(ctx, created.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"other":"writer"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}

	first := requireListed(t, lister, created.Name, created, "before any conflict", "the cache's")
	if _, err := client.Update(ctx, initialized(first), metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("an update of the cache's stale copy returned %v, want a conflict", err)
	}

	retry := requireListed(t, lister, created.Name, other, "after the conflict", "the API server's")
	updated, err := client.Update(ctx, initialized(retry), metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the retry on the lister's copy failed: %v", err)
	}
	if updated.Labels["other"] != "writer" {
		t.Fatalf("the retry dropped the other writer's label: %v", updated.Labels)
	}

	// The cache still holds the first version: the lister answers with the update's result.
	requireListed(t, lister, created.Name, updated, "after the update", "the update's")

	// Once the cache catches up, and beyond, it is the cache's copy again.
	newer, err := stack.TargetClientset.CoreV1().Nodes().Patch(ctx, created.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"later":"yes"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Update(newer); err != nil {
		t.Fatal(err)
	}
	requireListed(t, lister, created.Name, newer, "with the cache ahead", "the cache's")
}

// TestANodeGoneFromTheCacheIsForgotten: a Node the cache no longer holds is not found, and what
// a write returned of it is forgotten: the cache's copy counts again when the Node is back.
func TestANodeGoneFromTheCacheIsForgotten(t *testing.T) {
	ctx := context.Background()
	created, nodes, store := withStaleCache(t, "fresh-b")
	if _, err := nodes.Client().CoreV1().Nodes().Update(ctx, initialized(created), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(created); err != nil {
		t.Fatal(err)
	}
	lister := nodes.Informer().Lister()
	if _, err := lister.Get(created.Name); !apierrors.IsNotFound(err) {
		t.Fatalf("the lister answered %v for a Node gone from the cache, want not found", err)
	}
	if err := store.Add(created); err != nil {
		t.Fatal(err)
	}
	requireListed(t, lister, created.Name, created, "with the Node back in the cache", "the cache's")
}

// TestAnotherNodeOfTheSameNameWaitsForTheCache: the Node is deleted and created again while the
// cache holds the first. An update of the first conflicts; the API server's copy is another
// Node, so the lister keeps answering with the cache's, as without this package, rather than
// have the controller apply to the second what it made of the first.
func TestAnotherNodeOfTheSameNameWaitsForTheCache(t *testing.T) {
	ctx := context.Background()
	first, nodes, _ := withStaleCache(t, "fresh-c")
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second, err := stack.CreateNode(ctx, first.Name, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Client().CoreV1().Nodes().Update(ctx, initialized(first), metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("an update of the first Node returned %v, want a conflict", err)
	}
	got, err := nodes.Informer().Lister().Get(first.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != first.UID {
		t.Fatalf("the lister gave Node %s (the API server's, %s), want the cache's %s", got.UID, second.UID, first.UID)
	}
}

// initialized returns a copy of node with a label, as an initialization would change it.
func initialized(node *corev1.Node) *corev1.Node {
	node = node.DeepCopy()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels["init"] = "1"
	return node
}

// requireListed gets the Node from the lister, and fails the test unless it is want's version;
// when says at which point of the test, whose whose copy want is.
func requireListed(t *testing.T, lister corelisters.NodeLister, name string, want *corev1.Node, when, whose string) *corev1.Node {
	t.Helper()
	got, err := lister.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != want.ResourceVersion {
		t.Fatalf("%s the lister gave version %s, want %s %s", when, got.ResourceVersion, whose, want.ResourceVersion)
	}
	return got
}
