package clusterlabel

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	stack, err = testenv.Start(context.Background(), testenv.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the test stack: %v\n", err)
		return 1
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the test stack: %v\n", err)
		}
	}()
	return m.Run()
}

// TestNewNodesNetworkInterfaceIsLabelledAfterTheGrace: for a new Node, a sync labels the
// Machine and leaves the NetworkInterface to the route and target writes, then comes back by
// itself when the grace ends; a sync after the grace labels the NetworkInterface. The syncs
// are run by the test, one at a time, on a clock it sets.
func TestNewNodesNetworkInterfaceIsLabelledAfterTheGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ironcoreClient, err := stack.StartIronCoreClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	queue := &recordingQueue{TypedDelayingInterface: workqueue.NewTypedDelayingQueue[string]()}
	c, err := newController(ironcoreClient, stack.ClusterName, factory.Core().V1().Nodes(), record.NewFakeRecorder(10),
		workqueue.TypedRateLimitingQueueConfig[string]{DelayingQueue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	factory.Start(ctx.Done())

	const name = "grace-worker"
	machine, err := stack.CreateMachine(ctx, name, testenv.MachineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nic := &networkingv1alpha1.NetworkInterface{}
	nic.Namespace, nic.Name = stack.Namespace, testenv.NetworkInterfaceName(name)
	id := providerid.ID{Namespace: stack.Namespace, Machine: name}
	node, err := stack.CreateNode(ctx, name, testenv.NodeOptions{ProviderID: id.String()})
	if err != nil {
		t.Fatal(err)
	}
	// The sync reads the Node, Machine and NetworkInterface from the caches.
	if err := testenv.WaitFor(ctx, time.Minute, "the caches to show the Node, its Machine and its NetworkInterface", func(ctx context.Context) error {
		if nodes, err := c.nodes.ByIndex(nodesByMachineIndex, name); err != nil || len(nodes) == 0 {
			return fmt.Errorf("Node not in the cache (%v)", err)
		}
		cached, err := ironcoreClient.Machine(ctx, name)
		if err != nil {
			return err
		}
		if len(computev1alpha1.MachineNetworkInterfaceNames(cached)) == 0 {
			return fmt.Errorf("machine has no NetworkInterface names")
		}
		_, err = ironcoreClient.NetworkInterface(ctx, nic.Name)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), c.synced) {
		t.Fatal("the Node cache did not sync")
	}

	// Half a second before the grace ends.
	created := node.CreationTimestamp.Time
	c.now = func() time.Time { return created.Add(c.grace - 500*time.Millisecond) }
	if err := c.sync(ctx, name); err != nil {
		t.Fatal(err)
	}
	if got := labelOf(ctx, t, machine); got != stack.ClusterName {
		t.Errorf("the Machine's cluster label is %q during the grace, want %q", got, stack.ClusterName)
	}
	if got := labelOf(ctx, t, nic); got != "" {
		t.Errorf("the NetworkInterface of a new Node was labelled alone during the grace (%q); its route and target writes label it", got)
	}
	// The sync comes back when the grace ends, by the queue's own clock.
	if delays := queue.delays(name); len(delays) != 1 || delays[0] != 500*time.Millisecond {
		t.Errorf("the Machine was queued again after %v, want once, after the 500ms left of the grace", delays)
	}

	// After the grace the NetworkInterface still without the label gets it.
	c.now = func() time.Time { return created.Add(c.grace + time.Second) }
	if err := c.sync(ctx, name); err != nil {
		t.Fatal(err)
	}
	if got := labelOf(ctx, t, nic); got != stack.ClusterName {
		t.Errorf("the NetworkInterface's cluster label is %q after the grace, want %q", got, stack.ClusterName)
	}
}

// labelOf reads the object from the API server and returns its cluster label.
func labelOf(ctx context.Context, t *testing.T, obj client.Object) string {
	t.Helper()
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj.GetLabels()[keys.LabelCluster]
}

// recordingQueue records the delays keys are queued after.
type recordingQueue struct {
	workqueue.TypedDelayingInterface[string]
	mu    sync.Mutex
	after map[string][]time.Duration
}

func (q *recordingQueue) AddAfter(key string, delay time.Duration) {
	q.mu.Lock()
	if q.after == nil {
		q.after = map[string][]time.Duration{}
	}
	q.after[key] = append(q.after[key], delay)
	q.mu.Unlock()
	q.TypedDelayingInterface.AddAfter(key, delay)
}

func (q *recordingQueue) delays(key string) []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.after[key]
}
