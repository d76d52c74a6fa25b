package ironcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
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

// WaitingNetworkInterfaceChanges counts the changes to NetworkInterfaces waiting for a write.
func (c *Client) WaitingNetworkInterfaceChanges() int { return c.nics.waitingChanges() }

// UpdateNetworkInterface has mutate change the named NetworkInterface's prefixes, routes
// annotation and labels, and writes them (see nicWriter); mutate reports whether it changed
// anything. confirmNoChange has "nothing to change" in the cache confirmed live, for deletions:
// the cache cannot show a prefix never added, and the route controller asks again for any
// route its listing misses, which must stay free.
func (c *Client) UpdateNetworkInterface(ctx context.Context, name string, confirmNoChange bool, mutate func(*networkingv1alpha1.NetworkInterface) (bool, error)) error {
	if _, err := c.nics.change(ctx, name, confirmNoChange, mutate); err != nil {
		return fmt.Errorf("update NetworkInterface %s/%s: %w", c.namespace, name, err)
	}
	return nil
}

// UpdateNetworkInterfaceLater has mutate (see UpdateNetworkInterface) go with the next write of
// the named NetworkInterface, whoever makes it, or be written on its own after wait; it returns
// at once, and done, if not nil, gets the outcome.
func (c *Client) UpdateNetworkInterfaceLater(ctx context.Context, name string, wait time.Duration, mutate func(*networkingv1alpha1.NetworkInterface) (bool, error), done func(wrote bool, err error)) {
	var finish func(bool, error)
	if done != nil {
		finish = func(wrote bool, err error) {
			if err != nil {
				err = fmt.Errorf("update NetworkInterface %s/%s: %w", c.namespace, name, err)
			}
			done(wrote, err)
		}
	}
	c.nics.later(ctx, name, wait, mutate, finish)
}

// RideAlong has change applied to every NetworkInterface this client writes, in the same patch:
// it gets the NetworkInterface as it was and as the write's other changes leave it, changes the
// latter and reports whether it did. It never causes a write of its own: a change due anyway
// goes with the next write of its NetworkInterface at no cost.
func (c *Client) RideAlong(change func(base, changed *networkingv1alpha1.NetworkInterface) bool) {
	c.nics.mu.Lock()
	defer c.nics.mu.Unlock()
	c.nics.riders = append(c.nics.riders, change)
}

type jsonPatchOperation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// prefixOps test spec.prefixes and the routes annotation for their values in base and set
// them to those in changed.
func prefixOps(base, changed *networkingv1alpha1.NetworkInterface) []jsonPatchOperation {
	var oldPrefixes, newPrefixes any
	if len(base.Spec.Prefixes) > 0 {
		oldPrefixes = base.Spec.Prefixes
	}
	if len(changed.Spec.Prefixes) > 0 {
		newPrefixes = changed.Spec.Prefixes
	}
	ops := []jsonPatchOperation{{Op: "test", Path: "/spec/prefixes", Value: oldPrefixes}}
	if newPrefixes != nil {
		ops = append(ops, jsonPatchOperation{Op: "add", Path: "/spec/prefixes", Value: newPrefixes})
	} else if oldPrefixes != nil {
		ops = append(ops, jsonPatchOperation{Op: "remove", Path: "/spec/prefixes"})
	}
	oldValue, hadValue := base.Annotations[keys.AnnotationRoutes]
	newValue, hasValue := changed.Annotations[keys.AnnotationRoutes]
	if base.Annotations == nil {
		ops = append(ops, jsonPatchOperation{Op: "test", Path: "/metadata/annotations", Value: nil})
		if hasValue {
			ops = append(ops, jsonPatchOperation{Op: "add", Path: "/metadata/annotations", Value: map[string]string{keys.AnnotationRoutes: newValue}})
		}
		return ops
	}
	path := "/metadata/annotations/" + jsonPointerEscape(keys.AnnotationRoutes)
	var tested any
	if hadValue {
		tested = oldValue
	}
	ops = append(ops, jsonPatchOperation{Op: "test", Path: path, Value: tested})
	if hasValue {
		ops = append(ops, jsonPatchOperation{Op: "add", Path: path, Value: newValue})
	} else if hadValue {
		ops = append(ops, jsonPatchOperation{Op: "remove", Path: path})
	}
	return ops
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// isStaleRead tells whether a write failed on a conflict or a failed JSON patch test, which the
// API server reports as 422 Invalid without the causes a validation error names.
func isStaleRead(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details == nil || len(details.Causes) == 0
}

// conflictBackoff spaces out retries after write conflicts.
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5}
}

// NetworkInterfacesOfCluster returns the cached NetworkInterfaces of the cluster on network.
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
