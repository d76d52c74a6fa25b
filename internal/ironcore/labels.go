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

// AddLabel sets key=value on obj unless it is already there. It never overwrites another value
// (ErrLabelConflict): the JSON patch it writes first tests that the label is still absent, so
// a concurrent writer of the label makes it fail, while changes to anything else on the object
// do not. obj usually comes from the cache, which may lag: when the patch's test fails (the
// labels, or the label, are not as obj says), the object is read again from the API server and
// the check and the patch are made anew on it. It reports whether it wrote.
func (c *Client) AddLabel(ctx context.Context, obj client.Object, key, value string) (bool, error) {
	if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
		// Written with the other changes due for it, tested the same way.
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

// forgetIfCached forgets the label write just recorded on obj if the cache shows it already,
// or shows the object gone: the cache's event may have come before the record.
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

// labelWrites remembers, by object, the label AddLabel last added and the resource version its
// write left, until the cache shows that version or a newer one, or the object deleted. Asked
// again on a cached copy older than its write (another event of the object's controller came
// first), AddLabel then knows the label is there: its patch, which tests that the label is
// absent, would be refused, and the object read again. The NetworkInterfaces' writer keeps its
// own (see nicWriter).
type labelWrites struct {
	mu       sync.Mutex
	versions map[string]labelWrite
}

type labelWrite struct {
	key, value, resourceVersion string
	uid                         types.UID
}

// written tells whether this client wrote key=value on the object at a version newer than obj,
// the cached copy; once the cache has caught up, the write is forgotten.
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

// caughtUp forgets the write to the object once obj, the cached copy, is as new as it, and
// reports whether it did; w.mu must be held.
func (w *labelWrites) caughtUp(id string, obj client.Object) bool {
	last, ok := w.versions[id]
	if !ok || NewerVersion(last.resourceVersion, obj.GetResourceVersion()) {
		return false
	}
	delete(w.versions, id)
	return true
}

// record remembers that key=value was written on obj, as the write returned it.
func (w *labelWrites) record(kind string, obj client.Object, key, value string) {
	id := labelWriteID(kind, obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions == nil {
		w.versions = map[string]labelWrite{}
	}
	w.versions[id] = labelWrite{key: key, value: value, resourceVersion: obj.GetResourceVersion(), uid: obj.GetUID()}
}

// watch has the writes to objects of the kind forgotten as its informer shows them, or shows
// the objects deleted: AddLabel is not asked again about an object that is gone, nor always
// about one whose labeller has lost interest in it (a Machine whose Node went away).
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

// addLabelOnce is one attempt of AddLabel on obj as it was read.
func (c *Client) addLabelOnce(ctx context.Context, obj client.Object, key, value string) (bool, error) {
	current, ok := obj.GetLabels()[key]
	switch {
	case ok && current == value:
		return false, nil
	case ok:
		return false, fmt.Errorf("%s %s: %s=%q, not %q: %w", c.kindOf(obj), client.ObjectKeyFromObject(obj), key, current, value, ErrLabelConflict)
	}
	// A missing member tests as null (RFC 6902 leaves it open; the API server's JSON patch
	// library does so), which is how the patch asserts absence.
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

// readLive reads obj's object from the API server into a new object of its type, so that
// nothing of obj (a map, say) survives into the result.
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

// newObjectLike returns a new, empty object of obj's type.
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

// SetLabel sets key=value on obj, whatever it was, with a merge patch of that one key: other
// labels, and concurrent changes to them, are left alone. For keys only this CCM writes. A
// NetworkInterface's label is written with the other changes due for it.
func (c *Client) SetLabel(ctx context.Context, obj client.Object, key, value string) error {
	if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
		return c.changeNICLabel(ctx, nic.Name, key, &value)
	}
	return c.patchLabel(ctx, obj, key, &value)
}

// RemoveLabel removes key from obj with a merge patch of that one key.
func (c *Client) RemoveLabel(ctx context.Context, obj client.Object, key string) error {
	if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
		return c.changeNICLabel(ctx, nic.Name, key, nil)
	}
	return c.patchLabel(ctx, obj, key, nil)
}

// changeNICLabel sets (or, with a nil value, removes) a label of the named NetworkInterface.
// The caller saw the label as it wants it not to be; the cache is confirmed live when it
// already shows it, because it may lag behind a change just made.
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

// ClaimForCluster labels nic as the cluster's unless it is already; a NetworkInterface of
// another cluster is an error, and left as it is.
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
