package ironcore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// The views here give the newer of the cache and the writer's last write: a decision made on
// the cache alone right after a write would undo or miss that write.

// newest returns the writer's last write to the NetworkInterface, and true, if the cached copy
// is older; otherwise the cached copy, forgetting the write.
func (w *nicWriter) newest(name string, cached *networkingv1alpha1.NetworkInterface) (*networkingv1alpha1.NetworkInterface, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	written, ok := w.written[name]
	if !ok {
		return cached, false
	}
	if cached.UID != written.UID || !NewerVersion(written.ResourceVersion, cached.ResourceVersion) {
		delete(w.written, name)
		return cached, false
	}
	return written.DeepCopy(), true
}

// watch has the writer forget its writes as the cache shows them, or the objects deleted.
func (w *nicWriter) watch(informer cache.Informer) error {
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
				w.seen(nic)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
				w.gone(nic)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watch NetworkInterfaces: %w", err)
	}
	return nil
}

func (w *nicWriter) seen(cached *networkingv1alpha1.NetworkInterface) {
	_, _ = w.newest(cached.Name, cached)
}

func (w *nicWriter) remember(nic *networkingv1alpha1.NetworkInterface) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[string]*networkingv1alpha1.NetworkInterface{}
	}
	w.written[nic.Name] = nic.DeepCopy()
}

// NetworkInterfaceView returns the named NetworkInterface as this process knows it newest: its
// own last write if the cache does not show it yet.
func (c *Client) NetworkInterfaceView(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	cached, err := c.NetworkInterface(ctx, name)
	if err != nil {
		return nil, err
	}
	nic, _ := c.nics.newest(name, cached)
	return nic, nil
}

// NetworkInterfacesLabelledView is NetworkInterfacesLabelled on NetworkInterfaceView.
func (c *Client) NetworkInterfacesLabelledView(ctx context.Context, key, value string) ([]networkingv1alpha1.NetworkInterface, error) {
	cached, err := c.NetworkInterfacesLabelled(ctx, key, value)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(cached))
	var result []networkingv1alpha1.NetworkInterface
	for i := range cached {
		seen[cached[i].Name] = true
		if nic, _ := c.nics.newest(cached[i].Name, &cached[i]); nic.Labels[key] == value {
			result = append(result, *nic)
		}
	}
	for _, name := range c.nics.writtenNames() {
		if seen[name] {
			continue
		}
		nic, err := c.NetworkInterfaceView(ctx, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if nic.Labels[key] == value {
			result = append(result, *nic)
		}
	}
	return result, nil
}

// NetworkInterfaceCacheBehind tells whether the cache does not show this process's last write
// of the named NetworkInterface yet.
func (c *Client) NetworkInterfaceCacheBehind(ctx context.Context, name string) bool {
	cached, err := c.NetworkInterface(ctx, name)
	if err != nil {
		return false
	}
	_, behind := c.nics.newest(name, cached)
	return behind
}

// NetworkInterfaceLabelBehind names a NetworkInterface whose label key the cache does not show as
// this process last wrote it, or "": a decision IronCore makes from the label, in a cache of its
// own, must wait until this one shows it.
func (c *Client) NetworkInterfaceLabelBehind(ctx context.Context, key string) string {
	for _, name := range c.nics.writtenNames() {
		cached, err := c.NetworkInterface(ctx, name)
		if err != nil {
			continue
		}
		if newest, behind := c.nics.newest(name, cached); behind && newest.Labels[key] != cached.Labels[key] {
			return name
		}
	}
	return ""
}

func (w *nicWriter) writtenNames() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Collect(maps.Keys(w.written))
}

// NewerVersion tells whether resource version a is newer than b, comparing them as the
// integers the API server's etcd storage makes them; anything else is not newer.
func NewerVersion(a, b string) bool {
	av, err1 := strconv.ParseUint(a, 10, 64)
	bv, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && av > bv
}
