package nodesync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodesync"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// stack is shared by the package's tests: the stack starts once per package.
var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// TestNodeEventsShareOneKey: a handler that queues Nodes by key, as the upstream service
// controller's does, queues one key for any number of Nodes added, changed and deleted, while
// the lister still holds every Node under its own name.
func TestNodeEventsShareOneKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	nodes := nodesync.Coalesced(factory.Core().V1().Nodes())
	queue := workqueue.NewTyped[string]()
	defer queue.ShutDown()
	var mu sync.Mutex
	events := 0
	enqueue := func(obj any) {
		key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		events++
		mu.Unlock()
		queue.Add(key)
	}
	if _, err := nodes.Informer().AddEventHandlerWithResyncPeriod(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}, time.Minute); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	const n = 20
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("coalesced-%02d", i)
		if _, err := stack.CreateNode(ctx, names[i], testenv.NodeOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), names[i], metav1.DeleteOptions{})
		})
	}
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, names[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each Node is created and its status written: two events each, so the count alone does
	// not tell that the informer has seen every Node; the lister does.
	testenv.Await(t, ctx, time.Minute, "the informer to see every Node and the deletion", func(context.Context) error {
		mu.Lock()
		seen := events
		mu.Unlock()
		if seen < n+1 {
			return fmt.Errorf("%d events", seen)
		}
		listed, err := nodes.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		var listedNames []string
		for _, node := range listed {
			listedNames = append(listedNames, node.Name)
		}
		if slices.Contains(listedNames, names[0]) {
			return fmt.Errorf("the lister still holds the deleted Node %s", names[0])
		}
		for _, name := range names[1:] {
			if !slices.Contains(listedNames, name) {
				return fmt.Errorf("the lister does not hold Node %s: %v", name, listedNames)
			}
		}
		return nil
	})
	if queue.Len() != 1 {
		t.Fatalf("%d keys queued for %d Node events, want 1", queue.Len(), events)
	}
	if key, _ := queue.Get(); key != nodesync.Key {
		t.Fatalf("queued %q, want %q", key, nodesync.Key)
	}
}

// TestServiceControllerSeesEveryNode: the upstream service controller, on the coalesced
// informer, still gives a load balancer every Node that joins and drops every Node that
// leaves: its node sync reads the lister, not the key.
func TestServiceControllerSeesEveryNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	cloud := &recordingCloud{}
	c, err := servicecontroller.New(cloud, stack.TargetClientset, factory.Core().V1().Services(),
		nodesync.Coalesced(factory.Core().V1().Nodes()), "nodesync", utilfeature.DefaultFeatureGate)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Run(ctx, 2, controllersmetrics.NewControllerManagerMetrics("nodesync"))
	}()
	defer wg.Wait()
	defer cancel()

	if _, err := stack.CreateLoadBalancerService(ctx, "nodesync", testenv.ServiceOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).Delete(context.Background(), "nodesync", metav1.DeleteOptions{})
	})
	// The Nodes join once the Service's first sync has made its load balancer. Upstream's
	// service sync writes its Service cache without a lock that its node sync takes, so a node
	// sync while a Service syncs is a data race (in upstream's code); after the first sync this
	// Service is not synced again (its status changes; the spec, which would sync it, does not).
	cloud.waitForEnsured(t)
	// The sync ends with the status write: a node sync before it could still race with it.
	testenv.Await(t, ctx, time.Minute, "the Service's status to show its load balancer", func(ctx context.Context) error {
		service, err := stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "nodesync", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ingress := service.Status.LoadBalancer.Ingress; len(ingress) != 1 || ingress[0].IP != "192.0.2.1" {
			return fmt.Errorf("it shows %v", ingress)
		}
		return nil
	})
	const n = 15
	var names []string
	for i := range n {
		name := fmt.Sprintf("joining-%02d", i)
		names = append(names, name)
		if _, err := stack.CreateNode(ctx, name, testenv.NodeOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	cloud.waitForHosts(t, names)
	for _, name := range names[:5] {
		if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cloud.waitForHosts(t, names[5:])
}

// recordingCloud is a provider whose load balancers only record the Nodes they are given.
type recordingCloud struct {
	mu    sync.Mutex
	hosts []string
	// ensured counts the calls of EnsureLoadBalancer.
	ensured int
}

// waitForEnsured waits for a call of EnsureLoadBalancer.
func (c *recordingCloud) waitForEnsured(t *testing.T) {
	t.Helper()
	testenv.Await(t, context.Background(), time.Minute, "the load balancer to be ensured", func(context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ensured == 0 {
			return errors.New("not yet")
		}
		return nil
	})
}

var (
	_ cloudprovider.Interface    = (*recordingCloud)(nil)
	_ cloudprovider.LoadBalancer = (*recordingCloud)(nil)
)

func (c *recordingCloud) record(nodes []*corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hosts = c.hosts[:0]
	for _, node := range nodes {
		c.hosts = append(c.hosts, node.Name)
	}
	slices.Sort(c.hosts)
}

// waitForHosts waits until the latest call gave the load balancer exactly the named Nodes of
// the test among the stack's.
func (c *recordingCloud) waitForHosts(t *testing.T, want []string) {
	t.Helper()
	testenv.Await(t, context.Background(), time.Minute, fmt.Sprintf("the load balancer to have Nodes %v", want), func(context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		var got []string
		for _, host := range c.hosts {
			if len(host) > 8 && host[:8] == "joining-" {
				got = append(got, host)
			}
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("it has %v", got)
		}
		return nil
	})
}

func (c *recordingCloud) GetLoadBalancer(context.Context, string, *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	return nil, false, nil
}

func (c *recordingCloud) GetLoadBalancerName(context.Context, string, *corev1.Service) string {
	return "recorded"
}

func (c *recordingCloud) EnsureLoadBalancer(_ context.Context, _ string, _ *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	c.record(nodes)
	c.mu.Lock()
	c.ensured++
	c.mu.Unlock()
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.1"}}}, nil
}

func (c *recordingCloud) UpdateLoadBalancer(_ context.Context, _ string, _ *corev1.Service, nodes []*corev1.Node) error {
	c.record(nodes)
	return nil
}

func (c *recordingCloud) EnsureLoadBalancerDeleted(context.Context, string, *corev1.Service) error {
	return nil
}

func (c *recordingCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (c *recordingCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool)                  { return c, true }
func (c *recordingCloud) Instances() (cloudprovider.Instances, bool)                        { return nil, false }
func (c *recordingCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return nil, false }
func (c *recordingCloud) Zones() (cloudprovider.Zones, bool)                                { return nil, false }
func (c *recordingCloud) Clusters() (cloudprovider.Clusters, bool)                          { return nil, false }
func (c *recordingCloud) Routes() (cloudprovider.Routes, bool)                              { return nil, false }
func (c *recordingCloud) ProviderName() string                                              { return "recording" }
func (c *recordingCloud) HasClusterID() bool                                                { return true }
