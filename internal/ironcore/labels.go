package ironcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// ErrLabelConflict is wrapped when a label already holds a different value.
var ErrLabelConflict = errors.New("label holds another value")

// AddLabel sets key=value on obj unless it is there, and reports whether it wrote. It never
// overwrites another value (ErrLabelConflict): its JSON patch tests that the label is absent. obj
// may come from a lagging cache: when the test fails, the object is read live and tried again.
func (c *Client) AddLabel(ctx context.Context, obj client.Object, key, value string) (bool, error) {
	if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
		return c.nics.change(ctx, nic.Name, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			current, ok := nic.Labels[key]
			switch {
			case ok && current == value:
				return false, nil
			case ok:
				return false, fmt.Errorf("NetworkInterface %s: %s=%q, not %q: %w", client.ObjectKeyFromObject(nic), key, current, value, ErrLabelConflict)
			}
			if nic.Labels == nil {
				nic.Labels = map[string]string{}
			}
			nic.Labels[key] = value
			return true, nil
		})
	}
	if c.labelled.written(c.kindOf(obj), obj, key, value) {
		return false, nil
	}
	wrote := false
	current := obj
	err := retry.OnError(conflictBackoff(), isStaleRead, func() error {
		if current == nil {
			fresh, err := c.readLive(ctx, obj)
			if err != nil {
				return err
			}
			current = fresh
		}
		var err error
		wrote, err = c.addLabelOnce(ctx, current, key, value)
		if err != nil {
			current = nil // read it afresh, from the API server, on the next attempt
		}
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLabelConflict) {
			return false, err
		}
		return false, fmt.Errorf("label %s %s with %s=%s: %w", c.kindOf(obj), client.ObjectKeyFromObject(obj), key, value, err)
	}
	if wrote {
		c.labelled.record(c.kindOf(obj), current, key, value)
		c.forgetIfCached(ctx, current)
	}
	return wrote, nil
}

// forgetIfCached forgets the label write just recorded if the cache shows it, or the object
// gone: the cache's event may have come first.
func (c *Client) forgetIfCached(ctx context.Context, obj client.Object) {
	kind := c.kindOf(obj)
	cached, err := c.newObjectLike(obj)
	if err != nil {
		return
	}
	err = c.cache.Get(ctx, client.ObjectKeyFromObject(obj), cached)
	switch {
	case apierrors.IsNotFound(err):
		c.labelled.gone(kind, obj)
	case err == nil:
		c.labelled.mu.Lock()
		defer c.labelled.mu.Unlock()
		c.labelled.caughtUp(labelWriteID(kind, cached), cached)
	}
}

// labelWrites remembers, by object, the label AddLabel last added and the resource version it
// left, until the cache shows it. Asked again on an older cached copy, AddLabel then knows the
// label is there, instead of having its patch refused and reading the object again.
type labelWrites struct {
	mu       sync.Mutex
	versions map[string]labelWrite
}

type labelWrite struct {
	key, value, resourceVersion string
	uid                         types.UID
}

// written tells whether key=value was written at a version newer than obj, the cached copy.
func (w *labelWrites) written(kind string, obj client.Object, key, value string) bool {
	id := labelWriteID(kind, obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.versions[id]
	if !ok || w.caughtUp(id, obj) {
		return false
	}
	return last.key == key && last.value == value
}

// caughtUp forgets the write once obj, the cached copy, is as new; w.mu must be held.
func (w *labelWrites) caughtUp(id string, obj client.Object) bool {
	last, ok := w.versions[id]
	if !ok || NewerVersion(last.resourceVersion, obj.GetResourceVersion()) {
		return false
	}
	delete(w.versions, id)
	return true
}

func (w *labelWrites) record(kind string, obj client.Object, key, value string) {
	id := labelWriteID(kind, obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions == nil {
		w.versions = map[string]labelWrite{}
	}
	w.versions[id] = labelWrite{key: key, value: value, resourceVersion: obj.GetResourceVersion(), uid: obj.GetUID()}
}

// watch forgets the writes as the informer shows them, or the objects deleted: AddLabel may not
// be asked again (a Machine whose Node went away).
func (w *labelWrites) watch(kind string, informer cache.Informer) error {
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, newObj any) {
			if obj, ok := newObj.(client.Object); ok {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.caughtUp(labelWriteID(kind, obj), obj)
			}
		},
		DeleteFunc: func(deleted any) {
			if tombstone, ok := deleted.(toolscache.DeletedFinalStateUnknown); ok {
				deleted = tombstone.Obj
			}
			if obj, ok := deleted.(client.Object); ok {
				w.gone(kind, obj)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch %s labels: %w", kind, err)
	}
	return nil
}

// gone forgets the write to a deleted object; one to a newer object of its name is kept.
func (w *labelWrites) gone(kind string, obj client.Object) {
	id := labelWriteID(kind, obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	if last, ok := w.versions[id]; ok && last.uid == obj.GetUID() {
		delete(w.versions, id)
	}
}

func labelWriteID(kind string, obj client.Object) string {
	return kind + "/" + client.ObjectKeyFromObject(obj).String()
}

func (c *Client) addLabelOnce(ctx context.Context, obj client.Object, key, value string) (bool, error) {
	current, ok := obj.GetLabels()[key]
	switch {
	case ok && current == value:
		return false, nil
	case ok:
		return false, fmt.Errorf("%s %s: %s=%q, not %q: %w", c.kindOf(obj), client.ObjectKeyFromObject(obj), key, current, value, ErrLabelConflict)
	}
	// A test for null asserts absence in the API server's JSON patch library (RFC 6902 leaves it open).
	ops := []jsonPatchOperation{
		{Op: "test", Path: "/metadata/labels", Value: nil},
		{Op: "add", Path: "/metadata/labels", Value: map[string]string{key: value}},
	}
	if obj.GetLabels() != nil {
		path := "/metadata/labels/" + jsonPointerEscape(key)
		ops = []jsonPatchOperation{{Op: "test", Path: path, Value: nil}, {Op: "add", Path: path, Value: value}}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	if err := c.api.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return false, err
	}
	return true, nil
}

// readLive reads obj from the API server into a new object, so that nothing of obj survives.
func (c *Client) readLive(ctx context.Context, obj client.Object) (client.Object, error) {
	fresh, err := c.newObjectLike(obj)
	if err != nil {
		return nil, err
	}
	kind := c.kindOf(obj)
	if err := c.api.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s %s: %w", kind, client.ObjectKeyFromObject(obj), ErrNotFound)
		}
		return nil, fmt.Errorf("read %s %s: %w", kind, client.ObjectKeyFromObject(obj), err)
	}
	return fresh, nil
}

func (c *Client) newObjectLike(obj client.Object) (client.Object, error) {
	gvk, err := c.api.GroupVersionKindFor(obj)
	if err != nil {
		return nil, err
	}
	created, err := c.api.Scheme().New(gvk)
	if err != nil {
		return nil, err
	}
	fresh, ok := created.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s is not an object", gvk)
	}
	return fresh, nil
}

func (c *Client) kindOf(obj client.Object) string {
	if gvk, err := c.api.GroupVersionKindFor(obj); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

// SetLabel sets key=value on obj, whatever it was, leaving other labels alone; for keys only
// this CCM writes.
func (c *Client) SetLabel(ctx context.Context, obj client.Object, key, value string) error {
	if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
		return c.changeNICLabel(ctx, nic.Name, key, &value)
	}
	return c.patchLabel(ctx, obj, key, &value)
}

// RemoveLabel removes key from obj.
func (c *Client) RemoveLabel(ctx context.Context, obj client.Object, key string) error {
	if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
		return c.changeNICLabel(ctx, nic.Name, key, nil)
	}
	return c.patchLabel(ctx, obj, key, nil)
}

// changeNICLabel sets, or with a nil value removes, a label; the caller saw it otherwise, so a
// cache that shows it done is confirmed live.
func (c *Client) changeNICLabel(ctx context.Context, name, key string, value *string) error {
	_, err := c.nics.change(ctx, name, true, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		current, ok := nic.Labels[key]
		switch {
		case value == nil && !ok, value != nil && ok && current == *value:
			return false, nil
		case value == nil:
			delete(nic.Labels, key)
		default:
			if nic.Labels == nil {
				nic.Labels = map[string]string{}
			}
			nic.Labels[key] = *value
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("set label %s of NetworkInterface %s/%s: %w", key, c.namespace, name, err)
	}
	return nil
}

func (c *Client) patchLabel(ctx context.Context, obj client.Object, key string, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	if err := c.api.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("set label %s of %s %s: %w", key, c.kindOf(obj), client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// ClaimForCluster labels nic as the cluster's; one of another cluster is an error.
func ClaimForCluster(nic *networkingv1alpha1.NetworkInterface, cluster string) error {
	owner, labelled := nic.Labels[keys.LabelCluster]
	switch {
	case labelled && owner != cluster:
		return fmt.Errorf("NetworkInterface %s belongs to cluster %q", nic.Name, owner)
	case !labelled:
		if nic.Labels == nil {
			nic.Labels = map[string]string{}
		}
		nic.Labels[keys.LabelCluster] = cluster
	}
	return nil
}
