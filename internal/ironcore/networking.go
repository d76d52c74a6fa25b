package ironcore

import (
	"context"
	"fmt"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
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

// UpdateNetworkInterface applies mutate to the named NetworkInterface and writes the result
// with the read object's resourceVersion as a precondition, so that a concurrent writer's
// change is never overwritten: on a conflict it reads the object again from the API server
// and applies mutate anew. mutate reports whether it changed anything; if not, nothing is
// written. It returns the NetworkInterface as last read or written.
func (c *Client) UpdateNetworkInterface(ctx context.Context, name string, mutate func(*networkingv1alpha1.NetworkInterface) (bool, error)) (*networkingv1alpha1.NetworkInterface, error) {
	nic, err := c.NetworkInterface(ctx, name)
	if err != nil {
		return nil, err
	}
	err = retry.RetryOnConflict(conflictBackoff(), func() error {
		if nic == nil {
			fresh := &networkingv1alpha1.NetworkInterface{}
			if err := c.api.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, fresh); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("NetworkInterface %s/%s: %w", c.namespace, name, ErrNotFound)
				}
				return err
			}
			nic = fresh
		}
		base := nic.DeepCopy()
		changed, err := mutate(nic)
		if err != nil || !changed {
			return err
		}
		if err := c.api.Patch(ctx, nic, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			nic = nil // read it afresh, from the API server, on the next attempt
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("update NetworkInterface %s/%s: %w", c.namespace, name, err)
	}
	return nic, nil
}

// conflictBackoff spaces out retries after write conflicts; many writers may contend for one
// NetworkInterface (dual-stack routes are written in parallel, and apinetlet writes status).
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5}
}

// NetworkInterfacesOfCluster returns the cached NetworkInterfaces labelled as the cluster's
// on the given Network.
func (c *Client) NetworkInterfacesOfCluster(ctx context.Context, cluster, network string) ([]networkingv1alpha1.NetworkInterface, error) {
	labelled, err := c.NetworkInterfacesLabelled(ctx, keys.LabelCluster, cluster)
	if err != nil {
		return nil, err
	}
	nics := labelled[:0]
	for _, nic := range labelled {
		if nic.Spec.NetworkRef.Name == network {
			nics = append(nics, nic)
		}
	}
	return nics, nil
}
