package ironcore

import (
	"context"
	"fmt"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OnMachineChange calls handler with each Machine the cache sees added or changed.
func (c *Client) OnMachineChange(handler func(*computev1alpha1.Machine)) error {
	return onChange(c, &computev1alpha1.Machine{}, handler)
}

// OnNetworkInterfaceChange calls handler with each NetworkInterface the cache sees added or
// changed.
func (c *Client) OnNetworkInterfaceChange(handler func(*networkingv1alpha1.NetworkInterface)) error {
	return onChange(c, &networkingv1alpha1.NetworkInterface{}, handler)
}

func onChange[T client.Object](c *Client, obj T, handler func(T)) error {
	informer, err := c.cache.GetInformer(context.Background(), obj)
	if err != nil {
		return fmt.Errorf("informer for %T: %w", obj, err)
	}
	call := func(obj any) {
		if typed, ok := obj.(T); ok {
			handler(typed)
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    call,
		UpdateFunc: func(_, newObj any) { call(newObj) },
	})
	return err
}
