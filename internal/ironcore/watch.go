package ironcore

import (
	"context"
	"fmt"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
	informer, err := c.cache.GetInformer(context.Background(), &networkingv1alpha1.LoadBalancer{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for LoadBalancers: %w", err)
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok {
				handler(lb)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*networkingv1alpha1.LoadBalancer)
			lb, ok2 := newObj.(*networkingv1alpha1.LoadBalancer)
			if ok1 && ok2 && !equality.Semantic.DeepEqual(old.Status.IPs, lb.Status.IPs) {
				handler(lb)
			}
		},
	})
	return err
}

// OnNetworkInterfaceAddressesChange calls handler with each NetworkInterface whose state or
// addresses (status.ips) the cache sees change, and with each new one.
func (c *Client) OnNetworkInterfaceAddressesChange(handler func(*networkingv1alpha1.NetworkInterface)) error {
	informer, err := c.cache.GetInformer(context.Background(), &networkingv1alpha1.NetworkInterface{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("informer for NetworkInterfaces: %w", err)
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
				handler(nic)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*networkingv1alpha1.NetworkInterface)
			nic, ok2 := newObj.(*networkingv1alpha1.NetworkInterface)
			if ok1 && ok2 && (old.Status.State != nic.Status.State || !equality.Semantic.DeepEqual(old.Status.IPs, nic.Status.IPs)) {
				handler(nic)
			}
		},
	})
	return err
}
