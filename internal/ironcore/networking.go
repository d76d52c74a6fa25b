package ironcore

import (
	"context"
	"fmt"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NetworkInterface returns the named NetworkInterface from the cache.
func (c *Client) NetworkInterface(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := c.getCached(ctx, "NetworkInterface", c.namespace, name, nic); err != nil {
		return nil, err
	}
	return nic, nil
}

// NetworkInterfacesLabelled returns the cached NetworkInterfaces that carry key=value.
func (c *Client) NetworkInterfacesLabelled(ctx context.Context, key, value string) ([]networkingv1alpha1.NetworkInterface, error) {
	list := &networkingv1alpha1.NetworkInterfaceList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace), client.MatchingLabels{key: value}); err != nil {
		return nil, fmt.Errorf("list NetworkInterfaces with %s=%s: %w", key, value, err)
	}
	return list.Items, nil
}
