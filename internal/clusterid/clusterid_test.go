package clusterid

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

type clients struct{ client kubernetes.Interface }

func (c clients) Client(string) (kubernetes.Interface, error) { return c.client, nil }

func TestResolveRetriesUntilItReadsTheNamespaceUID(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, UID: "kube-system-uid"}})
	refusals := 0
	client.PrependReactor("get", "namespaces", func(clienttesting.Action) (bool, runtime.Object, error) {
		if refusals == 0 {
			refusals++
			return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), Namespace, errors.New("no rule"))
		}
		return false, nil, nil
	})
	id := New()
	if _, known := id.Known(); known {
		t.Fatal("a new ID is known")
	}
	if err := id.Resolve(context.Background(), clients{client}); err != nil {
		t.Fatal(err)
	}
	if value, known := id.Known(); !known || value != "kube-system-uid" {
		t.Fatalf("Known() = %q, %v; want kube-system-uid, true", value, known)
	}
	select {
	case <-id.Ready():
	default:
		t.Fatal("Ready is not closed once the ID is known")
	}
	if refusals != 1 {
		t.Fatalf("%d refused attempts, want 1", refusals)
	}
}

func TestResolveStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	id := New()
	if err := id.Resolve(ctx, clients{fake.NewClientset()}); err == nil {
		t.Fatal("want an error")
	}
	if _, known := id.Known(); known {
		t.Fatal("known without a namespace to read")
	}
}

func TestTheFirstValueCounts(t *testing.T) {
	id := New()
	id.Set("a")
	id.Set("b")
	if value, _ := id.Known(); value != "a" {
		t.Fatalf("Known() = %q, want a", value)
	}
	var unset *ID
	if _, known := unset.Known(); known || unset.Ready() != nil {
		t.Fatal("a nil ID is known")
	}
}
