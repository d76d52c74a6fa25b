package ironcore

import (
	"context"
	"fmt"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// loadBalancerWaiters hands the cache's LoadBalancers to callers waiting for a state, so that
// they need not poll.
type loadBalancerWaiters struct {
	mu     sync.Mutex
	byName map[string][]*loadBalancerWaiter
}

type loadBalancerWaiter struct {
	ready func(*networkingv1alpha1.LoadBalancer) bool
	// found has room for the first LoadBalancer ready accepts, so the handler never blocks.
	found chan *networkingv1alpha1.LoadBalancer
}

func (w *loadBalancerWaiters) add(name string, waiter *loadBalancerWaiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byName == nil {
		w.byName = map[string][]*loadBalancerWaiter{}
	}
	w.byName[name] = append(w.byName[name], waiter)
}

func (w *loadBalancerWaiters) remove(name string, waiter *loadBalancerWaiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	waiters := w.byName[name]
	for i := range waiters {
		if waiters[i] == waiter {
			waiters = append(waiters[:i], waiters[i+1:]...)
			break
		}
	}
	if len(waiters) == 0 {
		delete(w.byName, name)
		return
	}
	w.byName[name] = waiters
}

func (w *loadBalancerWaiters) seen(lb *networkingv1alpha1.LoadBalancer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	waiters := w.byName[lb.Name]
	kept := waiters[:0]
	for _, waiter := range waiters {
		if waiter.ready(lb) {
			waiter.found <- lb.DeepCopy()
			continue
		}
		kept = append(kept, waiter)
	}
	if len(kept) == 0 {
		delete(w.byName, lb.Name)
		return
	}
	w.byName[lb.Name] = kept
}

// watchLoadBalancers hands the cache's LoadBalancers to their waiters, and forgets this
// client's deletes once the cache shows them.
func (c *Client) watchLoadBalancers(informer cache.Informer) error {
	offer := func(obj any) {
		if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok {
			c.deletedLBs.seen(lb, false)
			c.waiters.seen(lb)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    offer,
		UpdateFunc: func(_, obj any) { offer(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok {
				c.deletedLBs.seen(lb, true)
			}
		},
	}); err != nil {
		return fmt.Errorf("watch LoadBalancers: %w", err)
	}
	return nil
}

// WaitForLoadBalancer waits at most timeout for the cache to hold the named LoadBalancer in a
// state ready accepts, and returns it, or nil. It makes no request.
func (c *Client) WaitForLoadBalancer(ctx context.Context, name string, timeout time.Duration, ready func(*networkingv1alpha1.LoadBalancer) bool) (*networkingv1alpha1.LoadBalancer, error) {
	waiter := &loadBalancerWaiter{ready: ready, found: make(chan *networkingv1alpha1.LoadBalancer, 1)}
	// Registered before the cache is read, not to miss a change in between.
	c.waiters.add(name, waiter)
	defer c.waiters.remove(name, waiter)
	if lb, err := c.LoadBalancer(ctx, name); err == nil && ready(lb) {
		return lb, nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case lb := <-waiter.found:
		return lb, nil
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
