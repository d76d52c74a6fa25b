package ironcore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
)

// A target sync resolves every Node to its Machine and NetworkInterfaces, for every Service,
// several times in a burst. The cache's Get copies each object, deeply or (unsafely) shallowly,
// so at 1,000 Nodes each sync allocated megabytes and ten syncs at once held tens of them. The
// readers below return the cache's own objects instead, from the stores of the informers the
// cache built (newInformers records them): shared with the informer and every other reader,
// they must never be changed.

// informerRegistry records the informers the cache builds, by the type of their objects.
type informerRegistry struct {
	mu     sync.Mutex
	byType map[reflect.Type]toolscache.SharedIndexInformer
}

// newInformer builds one of the cache's informers (on a reconnecting ListerWatcher, see
// reconnect.go) and records it.
func (r *informerRegistry) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	informer := toolscache.NewSharedIndexInformer(Reconnecting(lw), obj, resync, indexers)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byType == nil {
		r.byType = map[reflect.Type]toolscache.SharedIndexInformer{}
	}
	r.byType[reflect.TypeOf(obj)] = informer
	return informer
}

// store returns the store of the informer of objects of type t, if the cache built one.
func (r *informerRegistry) store(t reflect.Type) toolscache.Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	if informer := r.byType[t]; informer != nil {
		return informer.GetStore()
	}
	return nil
}

// ReadOnlyMachine returns the named Machine as the cache holds it, without a copy. The caller
// must not change it.
func (c *Client) ReadOnlyMachine(ctx context.Context, name string) (*computev1alpha1.Machine, error) {
	return readOnly(ctx, c, "Machine", name, c.Machine)
}

// ReadOnlyNetworkInterface returns the named NetworkInterface as the cache holds it, without a
// copy. The caller must not change it.
func (c *Client) ReadOnlyNetworkInterface(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	return readOnly(ctx, c, "NetworkInterface", name, c.NetworkInterface)
}

// readOnly reads from the store of the informer of T, or with copy (a copying read) if the
// cache has not built it.
func readOnly[T runtime.Object](ctx context.Context, c *Client, kind, name string, copying func(context.Context, string) (T, error)) (T, error) {
	store := c.informers.store(reflect.TypeFor[T]())
	if store == nil {
		return copying(ctx, name)
	}
	var none T
	key := objectKey(c.namespace, name)
	item, exists, err := store.GetByKey(key)
	switch {
	case err != nil:
		return none, fmt.Errorf("read %s %s: %w", kind, key, err)
	case !exists:
		return none, fmt.Errorf("%s %s: %w", kind, key, ErrNotFound)
	}
	obj, ok := item.(T)
	if !ok {
		return none, fmt.Errorf("read %s %s: the cache holds a %T", kind, key, item)
	}
	return obj, nil
}

// ReadOnlyLoadBalancerRouting returns the named LoadBalancerRouting as the cache holds it,
// without a copy (one destination per target: at 1,000 Nodes, a copy per sync is the largest
// allocation of a routing sync), or from the API server after ReadRoutingsLive. The caller must
// not change it.
func (c *Client) ReadOnlyLoadBalancerRouting(ctx context.Context, name string) (*networkingv1alpha1.LoadBalancerRouting, error) {
	if c.routingsLive {
		return c.LiveLoadBalancerRouting(ctx, name)
	}
	return readOnly(ctx, c, "LoadBalancerRouting", name, c.LoadBalancerRouting)
}

// ReadOnlyNetworkInterfacesOn returns the Machine's NetworkInterfaces on the Network (on every
// Network if network is empty) that exist, as the cache holds them, without copies, in the
// Machine's order. The caller must not change them.
func (c *Client) ReadOnlyNetworkInterfacesOn(ctx context.Context, machine *computev1alpha1.Machine, network string) ([]*networkingv1alpha1.NetworkInterface, error) {
	var nics []*networkingv1alpha1.NetworkInterface
	for _, name := range computev1alpha1.MachineNetworkInterfaceNames(machine) {
		nic, err := c.ReadOnlyNetworkInterface(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return nil, err
		case network == "" || nic.Spec.NetworkRef.Name == network:
			nics = append(nics, nic)
		}
	}
	return nics, nil
}
