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

// The readers below return the cache's own objects, which must never be changed: a target sync
// resolves every Node for every Service, and with the cache's copies each one allocated
// megabytes at 1,000 Nodes.

type informerRegistry struct {
	mu     sync.Mutex
	byType map[reflect.Type]toolscache.SharedIndexInformer
	// simulated, in a dry run, are the answered writes the informers' watches carry too.
	simulated *simulatedEvents
}

// newInformer builds a cache informer on a reconnecting ListerWatcher and records it.
func (r *informerRegistry) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	informer := toolscache.NewSharedIndexInformer(r.listWatch(lw, obj), obj, resync, indexers)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byType == nil {
		r.byType = map[reflect.Type]toolscache.SharedIndexInformer{}
	}
	r.byType[reflect.TypeOf(obj)] = informer
	return informer
}

// listWatch is lw for an informer of obj: reconnecting, and in a dry run with the simulated
// events of obj's kind.
func (r *informerRegistry) listWatch(lw toolscache.ListerWatcher, obj runtime.Object) toolscache.ListerWatcher {
	lw = Reconnecting(lw)
	if r.simulated == nil {
		return lw
	}
	return &simulatedListWatch{ListerWatcherWithContext: toolscache.ToListerWatcherWithContext(lw), events: r.simulated, kind: reflect.TypeOf(obj)}
}

func (r *informerRegistry) store(t reflect.Type) toolscache.Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	if informer := r.byType[t]; informer != nil {
		return informer.GetStore()
	}
	return nil
}

// ReadOnlyMachine returns the cached Machine uncopied; the caller must not change it.
func (c *Client) ReadOnlyMachine(ctx context.Context, name string) (*computev1alpha1.Machine, error) {
	return readOnly(ctx, c, "Machine", name, c.Machine)
}

// ReadOnlyNetworkInterface returns the cached NetworkInterface uncopied; the caller must not
// change it.
func (c *Client) ReadOnlyNetworkInterface(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	return readOnly(ctx, c, "NetworkInterface", name, c.NetworkInterface)
}

// readOnly reads from the informer's store, or with copying if the cache has not built it.
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

// ReadOnlyLoadBalancerRouting returns the cached routing uncopied, or after ReadRoutingsLive the
// API server's; the caller must not change it.
func (c *Client) ReadOnlyLoadBalancerRouting(ctx context.Context, name string) (*networkingv1alpha1.LoadBalancerRouting, error) {
	if c.routingsLive {
		return c.LiveLoadBalancerRouting(ctx, name)
	}
	return readOnly(ctx, c, "LoadBalancerRouting", name, c.LoadBalancerRouting)
}

// ReadOnlyNetworkInterfacesOn returns the Machine's cached NetworkInterfaces on network (any if
// empty) uncopied, in the Machine's order; the caller must not change them.
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
