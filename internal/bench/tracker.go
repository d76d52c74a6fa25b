package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

func nodeKey(name string) string    { return "node/" + name }
func serviceKey(name string) string { return "service/" + name }
func routeKey(name string) string   { return "route/" + name }

// tracker records when each Node, Service and route was created and when it was done, from
// watches of both control planes.
type tracker struct {
	mu           sync.Mutex
	createdAt    map[string]time.Time
	doneAt       map[string]time.Time
	want         int
	nodes        int
	services     int
	allDone      chan struct{}
	allDoneFired bool
}

func newTracker(ctx context.Context, stack *testenv.Stack, nodes, services int) (*tracker, error) {
	t := &tracker{
		createdAt: map[string]time.Time{}, doneAt: map[string]time.Time{},
		want: 2*nodes + services, nodes: nodes, services: services, allDone: make(chan struct{}),
	}
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(onAddOrUpdate(func(obj any) {
		if node, ok := obj.(*corev1.Node); ok && node.Spec.ProviderID != "" && !slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool {
			return taint.Key == cloudproviderapi.TaintExternalCloudProvider
		}) {
			t.done(nodeKey(node.Name))
		}
	})); err != nil {
		return nil, err
	}
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(onAddOrUpdate(func(obj any) {
		if service, ok := obj.(*corev1.Service); ok && len(service.Status.LoadBalancer.Ingress) > 0 {
			t.done(serviceKey(service.Name))
		}
	})); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())

	nicCache, err := cache.New(stack.IronCore.Config, cache.Options{
		Scheme:            stack.IronCore.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{stack.Namespace: {}},
	})
	if err != nil {
		return nil, err
	}
	informer, err := nicCache.GetInformer(ctx, &networkingv1alpha1.NetworkInterface{})
	if err != nil {
		return nil, err
	}
	if _, err := informer.AddEventHandler(onAddOrUpdate(func(obj any) {
		nic, ok := obj.(*networkingv1alpha1.NetworkInterface)
		if !ok || nic.Spec.MachineRef == nil {
			return
		}
		var machineIndex int
		if _, err := fmt.Sscanf(nic.Spec.MachineRef.Name, "node-%d", &machineIndex); err != nil {
			return
		}
		want := netip.MustParsePrefix(podCIDR(machineIndex))
		if slices.ContainsFunc(nic.Spec.Prefixes, func(source networkingv1alpha1.PrefixSource) bool {
			return source.Value != nil && source.Value.Prefix == want
		}) {
			t.done(routeKey(nic.Spec.MachineRef.Name))
		}
	})); err != nil {
		return nil, err
	}
	go func() { _ = nicCache.Start(ctx) }()
	factory.WaitForCacheSync(ctx.Done())
	if !nicCache.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the NetworkInterface cache did not sync")
	}
	return t, nil
}

func onAddOrUpdate(handle func(obj any)) toolscache.ResourceEventHandlerFuncs {
	return toolscache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }}
}

func (t *tracker) created(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.createdAt[key] = time.Now()
}

func (t *tracker) done(key string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.doneAt[key]; seen {
		return
	}
	if _, created := t.createdAt[key]; !created {
		return // not created by this run's burst
	}
	t.doneAt[key] = now
	if len(t.doneAt) == t.want && !t.allDoneFired {
		t.allDoneFired = true
		close(t.allDone)
	}
}

// wait blocks until everything is done, reporting progress every ten seconds.
func (t *tracker) wait(ctx context.Context, timeout time.Duration, progress io.Writer) error {
	deadline := time.After(timeout)
	ticker := time.NewTicker(10 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-t.allDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("not converged after %s: %s", timeout, t.progress())
		case <-ticker.C:
			fmt.Fprintf(progress, "  %s\n", t.progress())
		}
	}
}

func (t *tracker) progress() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	count := func(prefix string) int {
		n := 0
		for key := range t.doneAt {
			if len(key) > len(prefix) && key[:len(prefix)] == prefix {
				n++
			}
		}
		return n
	}
	return fmt.Sprintf("Nodes initialized %d/%d, Services with addresses %d/%d, routes %d/%d",
		count("node/"), t.nodes, count("service/"), t.services, count("route/"), t.nodes)
}

// durations returns, for the keys with the prefix, the time each took from creation to done.
func (t *tracker) durations(prefix string) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var durations []time.Duration
	for key, done := range t.doneAt {
		if len(key) > len(prefix) && key[:len(prefix)] == prefix {
			durations = append(durations, done.Sub(t.createdAt[key]))
		}
	}
	slices.Sort(durations)
	return durations
}

// fill writes the timings into the result.
func (t *tracker) fill(result *Result) {
	result.NodeInitialization = newTimings(t.durations("node/"))
	result.LoadBalancerReadiness = newTimings(t.durations("service/"))
	result.RouteConvergence = newTimings(t.durations("route/"))
}
