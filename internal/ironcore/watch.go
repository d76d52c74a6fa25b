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

// OnLoadBalancerDelete calls handler with each LoadBalancer the cache sees deleted, tombstones too.
func (c *Client) OnLoadBalancerDelete(handler func(*networkingv1alpha1.LoadBalancer)) error {
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

// OnLoadBalancerAddedOrAddressed calls handler with each LoadBalancer added or readdressed.
func (c *Client) OnLoadBalancerAddedOrAddressed(handler func(*networkingv1alpha1.LoadBalancer)) error {
	return onAddOrChange(c, &networkingv1alpha1.LoadBalancer{}, "LoadBalancers", false, func(old, lb *networkingv1alpha1.LoadBalancer) bool {
		return !equality.Semantic.DeepEqual(old.Status.IPs, lb.Status.IPs)
	}, handler)
}

// OnNetworkInterfaceChangeOf calls handler with each NetworkInterface added, deleted, or
// updated as changed says matters.
func (c *Client) OnNetworkInterfaceChangeOf(changed func(old, nic *networkingv1alpha1.NetworkInterface) bool, handler func(*networkingv1alpha1.NetworkInterface)) error {
	return onAddOrChange(c, &networkingv1alpha1.NetworkInterface{}, "NetworkInterfaces", true, changed, handler)
}

// onAddOrChange is onChange with updates filtered by changed, and deletes optional.
func onAddOrChange[T client.Object](c *Client, obj T, kind string, deletes bool, changed func(old, current T) bool, handler func(T)) error {
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

// OnLoadBalancerRoutingChange calls handler with each LoadBalancerRouting added, changed or
// deleted; after ReadRoutingsLive, of the cluster's only.
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

// OnLoadBalancerSpecChange calls handler with each LoadBalancer added, deleted, or changed in
// spec, deletion or retention; old is nil but for a change.
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

// OnLoadBalancerRoutingWritten calls handler with the name of each LoadBalancerRouting created
// or changed, told by the informer the reads come from: a second one may be ahead of it. After
// ReadRoutingsLive it watches metadata alone, not to decode routings IronCore rewrites on
// every target change; reads then go to the API server, never behind an event.
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
