package ironcore

import (
	"context"
	"fmt"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OnLoadBalancerDelete calls handler with each LoadBalancer the cache sees deleted, including
// those whose deletion it learnt of only by listing again.
func (c *Client) OnLoadBalancerDelete(handler func(*networkingv1alpha1.LoadBalancer)) error {
	// Not blocking until synced: a controller registering this must start even while the
	// IronCore API is unreachable.
	informer, err := c.cache.GetInformer(context.Background(), &networkingv1alpha1.LoadBalancer{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for LoadBalancers: %w", err)
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok {
				handler(lb)
			}
		},
	})
	return err
}

// OnLoadBalancerAddedOrAddressed calls handler with each LoadBalancer the cache sees added, and
// with each whose addresses (status.ips) it sees change.
func (c *Client) OnLoadBalancerAddedOrAddressed(handler func(*networkingv1alpha1.LoadBalancer)) error {
	return onAddOrChange(c, &networkingv1alpha1.LoadBalancer{}, "LoadBalancers", false, func(old, lb *networkingv1alpha1.LoadBalancer) bool {
		return !equality.Semantic.DeepEqual(old.Status.IPs, lb.Status.IPs)
	}, handler)
}

// OnNetworkInterfaceChangeOf calls handler with each NetworkInterface whose update changed
// says matters, with each new one and each deleted one.
func (c *Client) OnNetworkInterfaceChangeOf(changed func(old, nic *networkingv1alpha1.NetworkInterface) bool, handler func(*networkingv1alpha1.NetworkInterface)) error {
	return onAddOrChange(c, &networkingv1alpha1.NetworkInterface{}, "NetworkInterfaces", true, changed, handler)
}

// onAddOrChange calls handler with each object of obj's kind the cache sees added, with each
// update that changed says matters and, if deletes, with each deleted one.
func onAddOrChange[T client.Object](c *Client, obj T, kind string, deletes bool, changed func(old, current T) bool, handler func(T)) error {
	// Not blocking until synced: a controller registering this must start even while the
	// IronCore API is unreachable.
	informer, err := c.cache.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for %s: %w", kind, err)
	}
	handlers := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if current, ok := obj.(T); ok {
				handler(current)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(T)
			current, ok2 := newObj.(T)
			if ok1 && ok2 && changed(old, current) {
				handler(current)
			}
		},
	}
	if deletes {
		handlers.DeleteFunc = func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if current, ok := obj.(T); ok {
				handler(current)
			}
		}
	}
	_, err = informer.AddEventHandler(handlers)
	return err
}

// OnLoadBalancerRoutingChange calls handler with each LoadBalancerRouting the cache sees added,
// changed or deleted; after ReadRoutingsLive, with each of those labelled as the cluster's.
func (c *Client) OnLoadBalancerRoutingChange(handler func(*networkingv1alpha1.LoadBalancerRouting)) error {
	var informer interface {
		AddEventHandler(toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error)
	} = c.ownRoutings
	if !c.routingsLive {
		var err error
		if informer, err = c.cache.GetInformer(context.Background(), &networkingv1alpha1.LoadBalancerRouting{}, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("informer for LoadBalancerRoutings: %w", err)
		}
	}
	call := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if routing, ok := obj.(*networkingv1alpha1.LoadBalancerRouting); ok {
			handler(routing)
		}
	}
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, newObj any) { call(newObj) },
		DeleteFunc: call,
	})
	return err
}

// OnLoadBalancerSpecChange calls handler with each LoadBalancer the cache sees added, changed
// in its spec (a selector added or removed, say), retained, or deleted; with the one before
// for a change, nil otherwise.
func (c *Client) OnLoadBalancerSpecChange(handler func(old, lb *networkingv1alpha1.LoadBalancer)) error {
	informer, err := c.cache.GetInformer(context.Background(), &networkingv1alpha1.LoadBalancer{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for LoadBalancers: %w", err)
	}
	call := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok {
			handler(nil, lb)
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: call,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*networkingv1alpha1.LoadBalancer)
			lb, ok2 := newObj.(*networkingv1alpha1.LoadBalancer)
			if ok1 && ok2 && (old.Generation != lb.Generation || !equality.Semantic.DeepEqual(old.Spec, lb.Spec) ||
				!old.DeletionTimestamp.Equal(lb.DeletionTimestamp) || Retained(old) != Retained(lb)) {
				handler(old, lb)
			}
		},
		DeleteFunc: call,
	})
	return err
}

// OnLoadBalancerRoutingWritten calls handler with the name of each LoadBalancerRouting the
// cache sees created or changed. Where routings are cached, it is told by the informer the
// reads come from, so a handler that reads the routing finds what the event announced (a
// second informer of the same kind may be ahead of it). After ReadRoutingsLive it watches
// their metadata alone: IronCore writes those routings and rewrites each on every change of
// the targets, their destinations (one per target) are neither cached nor decoded here, and
// the reads go to the API server, which is never behind an event.
func (c *Client) OnLoadBalancerRoutingWritten(handler func(name string)) error {
	var obj client.Object = &networkingv1alpha1.LoadBalancerRouting{}
	if c.routingsLive {
		metadata := &metav1.PartialObjectMetadata{}
		metadata.SetGroupVersionKind(networkingv1alpha1.SchemeGroupVersion.WithKind("LoadBalancerRouting"))
		obj = metadata
	}
	informer, err := c.cache.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for LoadBalancerRoutings: %w", err)
	}
	call := func(obj any) {
		if routing, ok := obj.(metav1.Object); ok {
			handler(routing.GetName())
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, newObj any) { call(newObj) },
	})
	return err
}
