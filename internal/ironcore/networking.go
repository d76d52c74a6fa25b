package ironcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
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

// UpdateNetworkInterfacePrefixes applies mutate to the named NetworkInterface's prefixes and
// their ownership annotation (keys.AnnotationRoutes), and writes exactly those two fields with
// a JSON patch that first tests that both still hold what was read. A concurrent change to
// them fails the test, and mutate is applied anew to the object read again from the API server;
// changes to anything else (labels, status) do not get in the way, as a resourceVersion
// precondition would. mutate reports whether it changed anything; if not, nothing is written.
// With confirmNoChange, "nothing to change" found in the cache is confirmed by a read from the
// API server, because the cache may not yet show a change just made (by this process too).
// Deletions want that; additions do not: the cache cannot show a prefix that was never added,
// and the route controller asks again for any route its listing misses, which must stay free.
func (c *Client) UpdateNetworkInterfacePrefixes(ctx context.Context, name string, confirmNoChange bool, mutate func(*networkingv1alpha1.NetworkInterface) (bool, error)) error {
	nic, err := c.NetworkInterface(ctx, name)
	if err != nil {
		return err
	}
	readLive := func() error {
		fresh := &networkingv1alpha1.NetworkInterface{}
		if err := c.api.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("NetworkInterface %s/%s: %w", c.namespace, name, ErrNotFound)
			}
			return err
		}
		nic = fresh
		return nil
	}
	confirm := confirmNoChange
	err = retry.OnError(conflictBackoff(), isStaleRead, func() error {
		if nic == nil {
			if err := readLive(); err != nil {
				return err
			}
		}
		base := nic.DeepCopy()
		changed, err := mutate(nic)
		if err == nil && !changed && confirm {
			confirm = false
			if err := readLive(); err != nil {
				return err
			}
			base = nic.DeepCopy()
			changed, err = mutate(nic)
		}
		if err != nil || !changed {
			return err
		}
		patch, err := prefixesPatch(base, nic)
		if err != nil {
			return err
		}
		if err := c.api.Patch(ctx, nic, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			nic, confirm = nil, false // read it afresh, from the API server, on the next attempt
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("update the prefixes of NetworkInterface %s/%s: %w", c.namespace, name, err)
	}
	return nil
}

// jsonPatchOperation is one operation of an RFC 6902 JSON patch.
type jsonPatchOperation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// prefixesPatch tests spec.prefixes and the routes annotation for their values in base (a
// missing value tests as null) and sets them to their values in changed.
func prefixesPatch(base, changed *networkingv1alpha1.NetworkInterface) ([]byte, error) {
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
		return json.Marshal(ops)
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
	return json.Marshal(ops)
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// isStaleRead tells whether a write failed because the object changed since it was read: a
// resourceVersion conflict, or a failed test of a JSON patch. The API server reports the latter
// as 422 Invalid without details, whereas a validation error names its fields as causes.
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
