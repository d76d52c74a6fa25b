package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// watch checks, as they happen, what must never happen: a Node deleted that did not leave, a
// pod CIDR on two Nodes, a routing losing the destination of a Node that is still there, and
// a routing holding a Node that cannot serve.
func (c *chaos) watch(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(c.stack.TargetClientset, 0)
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(changesOf(true, func(node *corev1.Node, deleted bool) {
		if !deleted {
			c.podCIDRsChanged(node.Name, node.Spec.PodCIDRs)
			c.nodeReadiness(node)
			return
		}
		c.podCIDRsChanged(node.Name, nil)
		c.mu.Lock()
		leaving := c.leaving[node.Name]
		c.mu.Unlock()
		if !leaving {
			c.mu.Lock()
			c.result.WrongfulNodeDeletions++
			c.mu.Unlock()
			c.problem("Node %s was deleted though its Machine exists", node.Name)
		}
	})); err != nil {
		return err
	}
	factory.Start(ctx.Done())

	ironcoreCache, err := cache.New(c.stack.IronCore.Config, cache.Options{
		Scheme:            c.stack.IronCore.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{c.stack.Namespace: {}},
	})
	if err != nil {
		return err
	}
	routings, err := ironcoreCache.GetInformer(ctx, &networkingv1alpha1.LoadBalancerRouting{})
	if err != nil {
		return err
	}
	if _, err := routings.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if routing, ok := obj.(*networkingv1alpha1.LoadBalancerRouting); ok {
				c.mu.Lock()
				c.seeRouting(routing)
				c.mu.Unlock()
			}
		},
		UpdateFunc: func(old, obj any) {
			before, ok1 := old.(*networkingv1alpha1.LoadBalancerRouting)
			after, ok2 := obj.(*networkingv1alpha1.LoadBalancerRouting)
			if ok1 && ok2 {
				c.routingChanged(before, after)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if routing, ok := obj.(*networkingv1alpha1.LoadBalancerRouting); ok {
				c.mu.Lock()
				delete(c.seen, routing.Name)
				c.mu.Unlock()
			}
		},
	}); err != nil {
		return err
	}
	if err := c.watchServing(ctx, ironcoreCache); err != nil {
		return err
	}
	go func() { _ = ironcoreCache.Start(ctx) }()
	factory.WaitForCacheSync(ctx.Done())
	if !ironcoreCache.WaitForCacheSync(ctx) {
		return fmt.Errorf("the IronCore cache did not sync")
	}
	go c.checkServingEvery(ctx, ironcoreCache, 100*time.Millisecond)
	return nil
}

// watchServing follows the Machines and NetworkInterfaces for whether their Nodes can serve.
func (c *chaos) watchServing(ctx context.Context, ironcoreCache cache.Cache) error {
	machines, err := ironcoreCache.GetInformer(ctx, &computev1alpha1.Machine{})
	if err != nil {
		return err
	}
	if _, err := machines.AddEventHandler(changesOf(false, c.machineChanged)); err != nil {
		return err
	}
	nics, err := ironcoreCache.GetInformer(ctx, &networkingv1alpha1.NetworkInterface{})
	if err != nil {
		return err
	}
	_, err = nics.AddEventHandler(changesOf(true, c.networkInterfaceChanged))
	return err
}

// checkServingEvery checks the cached routings against the Nodes that cannot serve.
func (c *chaos) checkServingEvery(ctx context.Context, ironcoreCache cache.Cache, period time.Duration) {
	eachTick(ctx, period, func() {
		routings := &networkingv1alpha1.LoadBalancerRoutingList{}
		lbs := &networkingv1alpha1.LoadBalancerList{}
		if ironcoreCache.List(ctx, routings, client.InNamespace(c.stack.Namespace)) != nil ||
			ironcoreCache.List(ctx, lbs, client.InNamespace(c.stack.Namespace)) != nil {
			return
		}
		// The routing of a LoadBalancer being deleted (a type switch's predecessor) serves no one.
		live := make(map[string]bool, len(lbs.Items))
		for _, lb := range lbs.Items {
			live[lb.Name] = lb.DeletionTimestamp == nil
		}
		serving := slices.DeleteFunc(routings.Items, func(routing networkingv1alpha1.LoadBalancerRouting) bool { return !live[routing.Name] })
		c.checkServing(serving, time.Now())
	})
}

// podCIDRsChanged records a Node's pod CIDRs (none once it is gone), and a problem for each
// that another Node in the cluster holds too.
func (c *chaos) podCIDRsChanged(node string, cidrs []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(cidrs) == 0 {
		delete(c.podCIDRs, node)
		return
	}
	if slices.Equal(c.podCIDRs[node], cidrs) {
		return
	}
	c.podCIDRs[node] = cidrs
	for other, held := range c.podCIDRs {
		if other == node {
			continue
		}
		for _, cidr := range cidrs {
			if slices.Contains(held, cidr) {
				c.result.SharedPodCIDRs++
				c.result.Problems = append(c.result.Problems, fmt.Sprintf("pod CIDR %s is on Node %s and Node %s", cidr, node, other))
			}
		}
	}
}

// routingChanged records each destination of a present Node that a routing lost, and when it
// came back: of a Local Service, only the Nodes of its endpoints count, and a Node disturbed on
// purpose (excused) or a destination removed by hand does not. A destination is its
// NetworkInterface where the routing names it: an address alone is no identity, as IronCore
// gives a leaving Node's address to the next new one.
func (c *chaos) routingChanged(before, after *networkingv1alpha1.LoadBalancerRouting) {
	had, has := destinations(before), destinations(after)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seeRouting(after)
	state := c.byLoadBalancer[after.Name]
	present := map[string]string{}
	for node := range c.present {
		if c.isExcused(node, time.Now()) || (state != nil && state.local && !slices.Contains(state.endpoints, node)) {
			continue
		}
		present["nic:"+testenv.NetworkInterfaceName(node)] = node
		for _, ip := range c.nodeIPs[node] {
			present["ip:"+ip] = node
		}
	}
	for key := range had {
		drop := after.Name + " " + key
		if node, ok := present[key]; ok && !has[key] && !c.handEdits[drop] {
			if _, open := c.drops[drop]; !open {
				c.drops[drop] = time.Now()
				c.result.Problems = append(c.result.Problems, fmt.Sprintf("LoadBalancerRouting %s dropped Node %s (%s), which is still there, at %.1fs (its NetworkInterface unservable for: %v; %s)",
					after.Name, node, key, time.Since(c.started).Seconds(), c.unservable[testenv.NetworkInterfaceName(node)], describeRouting(after, state)))
			}
		}
	}
	for key := range has {
		drop := after.Name + " " + key
		if since, open := c.drops[drop]; open {
			c.result.TargetDrops = append(c.result.TargetDrops, newSeconds(time.Since(since)))
			delete(c.drops, drop)
		}
	}
}

// describeRouting says what a dropped destination's routing was, for the problem's reader: its
// version and writer, and the Service's policy and endpoints as the run knows them.
func describeRouting(routing *networkingv1alpha1.LoadBalancerRouting, state *chaosService) string {
	var managers []string
	for _, entry := range routing.ManagedFields {
		managers = append(managers, entry.Manager)
	}
	description := fmt.Sprintf("routing version %s, managed by %v", routing.ResourceVersion, managers)
	if state != nil {
		description += fmt.Sprintf(", Service %s Local %v with endpoints on %v", state.service.Name, state.local, state.endpoints)
	}
	return description
}

// destinations names a routing's destinations by destinationKey.
func destinations(routing *networkingv1alpha1.LoadBalancerRouting) map[string]bool {
	keys := map[string]bool{}
	for _, destination := range routing.Destinations {
		keys[destinationKey(destination)] = true
	}
	return keys
}

// destinationKey names a destination by its NetworkInterface, or by its address where it names
// none.
func destinationKey(destination networkingv1alpha1.LoadBalancerDestination) string {
	if destination.TargetRef != nil && destination.TargetRef.Name != "" {
		return "nic:" + destination.TargetRef.Name
	}
	return "ip:" + destination.IP.String()
}

// sample records every second how many Services exist and have an address, how many
// IronCore LoadBalancers there are and whether any Service has two of one type (a type switch
// has one of each for a moment), whether a Service that had an address has none, and whether
// faults are on.
func (c *chaos) sample(ctx context.Context) {
	addressed := map[string]bool{}
	eachTick(ctx, time.Second, func() {
		services, err := c.stack.TargetClientset.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		lbs := &networkingv1alpha1.LoadBalancerList{}
		if err := c.stack.IronCore.Client.List(ctx, lbs, client.InNamespace(c.stack.Namespace)); err != nil {
			return
		}
		sample := ChaosSample{AtSeconds: newSeconds(time.Since(c.started)), LoadBalancers: len(lbs.Items)}
		nowAddressed := map[string]bool{}
		for _, service := range services.Items {
			if service.Spec.Type != corev1.ServiceTypeLoadBalancer {
				continue
			}
			sample.Services++
			if len(service.Status.LoadBalancer.Ingress) > 0 {
				sample.WithAddress++
				nowAddressed[string(service.UID)] = true
			} else if addressed[string(service.UID)] && service.DeletionTimestamp == nil {
				c.problem("Service %s had an address and shows none", service.Name)
				c.mu.Lock()
				c.result.AddressesLost++
				c.mu.Unlock()
			}
		}
		addressed = nowAddressed
		perService := map[string]int{}
		for _, lb := range lbs.Items {
			if lb.DeletionTimestamp == nil {
				perService[lb.Annotations[keys.AnnotationServiceUID]+" "+string(lb.Spec.Type)]++
			}
		}
		for service, n := range perService {
			if n > 1 {
				c.problem("Service %s has %d IronCore LoadBalancers of one type at once", service, n)
				c.mu.Lock()
				c.result.Duplicates++
				c.mu.Unlock()
			}
		}
		c.mu.Lock()
		sample.Faults = c.faultsOn
		c.result.Timeline = append(c.result.Timeline, sample)
		c.mu.Unlock()
	})
}

// eachTick calls tick once a period, the first time a period from now, until ctx ends.
func eachTick(ctx context.Context, period time.Duration, tick func()) {
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		tick()
	}
}

// changesOf is an event handler calling changed with each object of type T its informer sees
// updated, added too if added, or deleted (deleted true; also from a tombstone).
func changesOf[T any](added bool, changed func(obj T, deleted bool)) toolscache.ResourceEventHandlerFuncs {
	handle := func(obj any, deleted bool) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if typed, ok := obj.(T); ok {
			changed(typed, deleted)
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { handle(obj, false) },
		DeleteFunc: func(obj any) { handle(obj, true) },
	}
	if added {
		handler.AddFunc = func(obj any) { handle(obj, false) }
	}
	return handler
}
