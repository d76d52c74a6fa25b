package ironcore

import (
	"context"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
)

// NetworkInterface returns the named NetworkInterface from the cache.
func (c *Client) NetworkInterface(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := c.getCached(ctx, "NetworkInterface", c.namespace, name, nic); err != nil {
		return nil, err
	}
	return nic, nil
}
