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

// The NetworkInterface writer remembers what it last wrote to each NetworkInterface until the
// cache shows it. A decision made on the cache alone right after a write would undo or miss
// that write; the views here give the newer of the two.

// newest returns what this writer last wrote to the named NetworkInterface if the cached copy
// is older, and reports whether it did; otherwise the cached copy, forgetting the write.
// Resource versions are compared as the integers the API server's etcd storage makes them;
// anything else counts as the cache being newer.
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

// watch has the writer forget its writes as the cache's informer shows them, or shows their
// NetworkInterfaces deleted.
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

// seen forgets the write to a NetworkInterface once the cache shows it, or something newer.
func (w *nicWriter) seen(cached *networkingv1alpha1.NetworkInterface) {
	_, _ = w.newest(cached.Name, cached)
}

// remember records what this writer wrote to a NetworkInterface.
func (w *nicWriter) remember(nic *networkingv1alpha1.NetworkInterface) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[string]*networkingv1alpha1.NetworkInterface{}
	}
	w.written[nic.Name] = nic.DeepCopy()
}

// NetworkInterfaceView returns the named NetworkInterface as this process knows it newest: what
// it last wrote to it if the cache does not show that write yet, else the cached copy. A
// decision made on the cache alone right after a write would undo or miss that write.
func (c *Client) NetworkInterfaceView(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	cached, err := c.NetworkInterface(ctx, name)
	if err != nil {
		return nil, err
	}
	nic, _ := c.nics.newest(name, cached)
	return nic, nil
}

// NetworkInterfacesLabelledView is NetworkInterfacesLabelled on NetworkInterfaceView: the
// NetworkInterfaces that carry key=value, each as this process knows it newest, including
// those whose label only its own write, not yet the cache, shows.
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

// NetworkInterfaceLabelBehind names a NetworkInterface whose label key this process last wrote
// differently from what the cache shows, or returns "": a decision that IronCore must make
// from that label, which it reads from a cache of its own, must wait until this cache at least
// shows it, added or removed.
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

// writtenNames names the NetworkInterfaces whose last write the cache may not show yet.
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
