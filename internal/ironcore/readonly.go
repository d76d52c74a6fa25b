package ironcore

import (
	"context"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A target sync resolves every Node to its Machine and NetworkInterfaces, for every Service,
// several times in a burst. The cache's Get copies each object deeply, so at 300 Nodes that is
// megabytes of garbage per sync and a live set that grows with the number of syncs running at
// once. The readers below skip that copy: what they return shares its maps, slices and
// pointers with the cache's object, so it must never be changed.

// ReadOnlyMachine returns the named Machine from the cache without copying what it holds. The
// caller must not change it.
func (c *Client) ReadOnlyMachine(ctx context.Context, name string) (*computev1alpha1.Machine, error) {
	machine := &computev1alpha1.Machine{}
	if err := c.getCached(ctx, "Machine", c.namespace, name, machine, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return machine, nil
}

// ReadOnlyNetworkInterface returns the named NetworkInterface from the cache without copying
// what it holds. The caller must not change it.
func (c *Client) ReadOnlyNetworkInterface(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := c.getCached(ctx, "NetworkInterface", c.namespace, name, nic, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return nic, nil
}
