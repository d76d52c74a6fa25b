package nodeipam_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// allocator stands in for the provider's IronCore allocation, which the provider's own tests
// cover: it answers what the test set for a Node, pending until then, and counts the asks.
type allocator struct {
	mu          sync.Mutex
	allocations map[string]nodeipam.Allocation
	asked       map[string]int
}

func newAllocator() *allocator {
	return &allocator{allocations: map[string]nodeipam.Allocation{}, asked: map[string]int{}}
}

func (a *allocator) AllocatePodCIDRs(_ context.Context, node *corev1.Node) (nodeipam.Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[node.Name]++
	if allocation, ok := a.allocations[node.Name]; ok {
		return allocation, nil
	}
	return nodeipam.Allocation{NetworkInterface: "nic-" + node.Name, Pending: []string{"IPv6: no Prefix yet"},
		PendingFamilies: []corev1.IPFamily{corev1.IPv6Protocol}}, nil
}

func (a *allocator) ReleaseUnusedPodCIDRs(context.Context) ([]nodeipam.Released, error) {
	return nil, nil
}

func (a *allocator) DiagnosePodCIDRs(context.Context, corev1.IPFamily) string { return "" }

func (a *allocator) allocate(node string, cidrs ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allocations[node] = nodeipam.Allocation{NetworkInterface: "nic-" + node, CIDRs: cidrs}
}

func (a *allocator) timesAsked(node string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked[node]
}

// start runs the controller on real informers, the IronCore cache and the target cluster.
func start(t *testing.T, a *allocator) *record.FakeRecorder {
	t.Helper()
	recorder := record.NewFakeRecorder(100)
	stack.RunControllerForTest(t, stack.TargetClientset, func(ironcoreClient *ironcore.Client, factory informers.SharedInformerFactory) (testenv.Controller, error) {
		return nodeipam.New(nodeipam.Config{IronCore: ironcoreClient, Allocator: a, Nodes: factory.Core().V1().Nodes(),
			Client: stack.TargetClientset, Recorder: recorder})
	})
	return recorder
}

func podCIDRsOf(ctx context.Context, name string) ([]string, error) {
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return node.Spec.PodCIDRs, nil
}

func waitForPodCIDRs(t *testing.T, name string, want ...string) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), time.Minute, "the pod CIDRs of Node "+name, func(ctx context.Context) error {
		cidrs, err := podCIDRsOf(ctx, name)
		if err == nil && !slices.Equal(cidrs, want) {
			err = fmt.Errorf("pod CIDRs %v, want %v", cidrs, want)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// spec.podCIDRs is immutable: it is written once, with every family, never with the families
// allocated so far.
func TestPodCIDRsAreSetOnceEveryFamilyIsAllocated(t *testing.T) {
	a := newAllocator()
	recorder := start(t, a)
	ctx := context.Background()
	if _, err := stack.CreateNode(ctx, "ipam-a", testenv.NodeOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Node is synced again while it waits (with the queue's backoff): after the second
	// ask, the first answer (pending) has been acted on.
	if err := testenv.WaitFor(ctx, time.Minute, "the Node to be asked for twice", func(context.Context) error {
		if n := a.timesAsked("ipam-a"); n < 2 {
			return fmt.Errorf("asked %d times", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if cidrs, err := podCIDRsOf(ctx, "ipam-a"); err != nil || len(cidrs) > 0 {
		t.Fatalf("pod CIDRs %v (%v) while a family is pending, want none", cidrs, err)
	}
	a.allocate("ipam-a", "10.244.7.0/24", "fd00:10:244:7::/64")
	waitForPodCIDRs(t, "ipam-a", "10.244.7.0/24", "fd00:10:244:7::/64")
	testenv.AwaitEvent(t, recorder, time.Minute, nodeipam.ReasonAllocated)
}

// IronCore gives a pod CIDR back as soon as its NetworkInterface is gone, before the Node that
// had it is deleted: another Node gets it only once that Node is gone.
func TestAPodCIDRStillHeldByAnotherNodeWaitsForIt(t *testing.T) {
	a := newAllocator()
	recorder := start(t, a)
	ctx := context.Background()
	if _, err := stack.CreateNode(ctx, "ipam-old", testenv.NodeOptions{PodCIDRs: []string{"10.244.9.0/24"}}); err != nil {
		t.Fatal(err)
	}
	a.allocate("ipam-new", "10.244.9.0/24")
	if _, err := stack.CreateNode(ctx, "ipam-new", testenv.NodeOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.AwaitEvent(t, recorder, time.Minute, nodeipam.ReasonHeldElsewhere)
	if cidrs, err := podCIDRsOf(ctx, "ipam-new"); err != nil || len(cidrs) > 0 {
		t.Fatalf("pod CIDRs %v (%v) while another Node holds them, want none", cidrs, err)
	}
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, "ipam-old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPodCIDRs(t, "ipam-new", "10.244.9.0/24")
}
