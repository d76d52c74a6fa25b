package ironcore

import (
	"context"
	"fmt"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OnMachineChange calls handler with each Machine the cache sees added, changed or deleted.
func (c *Client) OnMachineChange(handler func(*computev1alpha1.Machine)) error {
	return onChange(c, &computev1alpha1.Machine{}, handler)
}

// OnMachinePoolChange calls handler with each MachinePool added, changed or deleted.
func (c *Client) OnMachinePoolChange(handler func(*computev1alpha1.MachinePool)) error {
	return onChange(c, &computev1alpha1.MachinePool{}, handler)
}

// OnNetworkInterfaceChange calls handler with each NetworkInterface added, changed or deleted.
func (c *Client) OnNetworkInterfaceChange(handler func(*networkingv1alpha1.NetworkInterface)) error {
	return onChange(c, &networkingv1alpha1.NetworkInterface{}, handler)
}

// onChange adds handler to the kind's informer without waiting for it to sync, as the On...
// functions all do: with IronCore unreachable, the CCM's controllers must start all the same.
func onChange[T client.Object](c *Client, obj T, handler func(T)) error {
	informer, err := c.cache.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for %T: %w", obj, err)
	}
	call := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if typed, ok := obj.(T); ok {
			handler(typed)
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, newObj any) { call(newObj) },
		DeleteFunc: call,
	})
	return err
}

// OnNetworkInterfaceUpdate calls handler with each NetworkInterface added (old nil) or changed.
func (c *Client) OnNetworkInterfaceUpdate(handler func(old, nic *networkingv1alpha1.NetworkInterface)) error {
	informer, err := c.cache.GetInformer(context.Background(), &networkingv1alpha1.NetworkInterface{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for NetworkInterfaces: %w", err)
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
				handler(nil, nic)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*networkingv1alpha1.NetworkInterface)
			nic, ok2 := newObj.(*networkingv1alpha1.NetworkInterface)
			if ok1 && ok2 {
				handler(old, nic)
			}
		},
	})
	return err
}
