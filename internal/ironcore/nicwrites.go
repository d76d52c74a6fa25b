package ironcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// A new Node's NetworkInterface gets the cluster label, the load balancer target label and its
// pod route from three controllers within seconds of each other. Written one by one, that is
// three patches, and every patch of a NetworkInterface makes IronCore's controller-manager
// reconcile every LoadBalancer. nicWriter combines them: the changes due for one
// NetworkInterface wait together for a token of the client's rate limiter, and are then
// written in one JSON patch. An idle client has a token at once, so a lone change is not
// delayed; in a burst, the changes that come while the queue drains share one write.
//
// The patch tests every field it sets for the value it was computed from, so a concurrent
// change to one of them (by another writer, or a cache that lagged) fails it, and the changes
// are computed anew on the object read from the API server; changes to anything else on the
// NetworkInterface (status, other labels) do not get in the way. Nothing is lost: each change
// is applied to the result of the ones before it.
type nicWriter struct {
	client *Client
	// limiter is the client's rate limiter; api makes the patches without taking another token.
	limiter flowcontrol.RateLimiter
	api     client.Client

	mu sync.Mutex
	// waiting holds the changes not yet taken by a write, by NetworkInterface name; a name is
	// in it, even with no changes, while a goroutine writes that NetworkInterface.
	waiting map[string][]*nicChange
	// written holds what this writer last wrote to each NetworkInterface, until the cache has
	// caught up with it: a later change is computed on it rather than on an older cached copy,
	// which would have the patch's tests fail (or a label sync ask again for a label just
	// written).
	written map[string]*networkingv1alpha1.NetworkInterface
}

// nicChange is one caller's change to a NetworkInterface.
type nicChange struct {
	ctx context.Context
	// mutate changes the NetworkInterface in place and reports whether it changed anything.
	mutate func(*networkingv1alpha1.NetworkInterface) (bool, error)
	// confirmNoChange has "nothing to change", when found on the cached object, confirmed on
	// the object read from the API server, because the cache may not show a change just made.
	confirmNoChange bool
	// done receives the outcome; it has room for it, so the writer never blocks.
	done chan nicOutcome
}

type nicOutcome struct {
	wrote bool
	err   error
}

// nicWriteTimeout bounds one write of a NetworkInterface, its wait for a token included.
const nicWriteTimeout = time.Minute

// waitingChanges counts the changes not yet taken by a write.
func (w *nicWriter) waitingChanges() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, changes := range w.waiting {
		n += len(changes)
	}
	return n
}

// change submits a change to the named NetworkInterface and waits for its outcome: whether it
// was written, or why not. If ctx ends first, the change may still be written.
func (w *nicWriter) change(ctx context.Context, name string, confirmNoChange bool, mutate func(*networkingv1alpha1.NetworkInterface) (bool, error)) (bool, error) {
	change := &nicChange{ctx: ctx, mutate: mutate, confirmNoChange: confirmNoChange, done: make(chan nicOutcome, 1)}
	w.mu.Lock()
	if w.waiting == nil {
		w.waiting = map[string][]*nicChange{}
	}
	pending, writing := w.waiting[name]
	w.waiting[name] = append(pending, change)
	w.mu.Unlock()
	if !writing {
		go w.run(name)
	}
	select {
	case outcome := <-change.done:
		return outcome.wrote, outcome.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// run writes the named NetworkInterface until no change for it is waiting. One goroutine per
// NetworkInterface at a time, so that its writes do not race each other.
func (w *nicWriter) run(name string) {
	for {
		// Only this goroutine takes changes of name, so a queue found non-empty stays so until
		// it takes them: a token is waited for only when a write is due.
		w.mu.Lock()
		if len(w.waiting[name]) == 0 {
			delete(w.waiting, name)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), nicWriteTimeout)
		// The token first: changes that come while it is awaited join this write.
		tokenErr := w.limiter.Wait(ctx)
		w.mu.Lock()
		batch := w.waiting[name]
		w.waiting[name] = nil
		w.mu.Unlock()
		if tokenErr != nil {
			for _, change := range batch {
				change.done <- nicOutcome{err: fmt.Errorf("write NetworkInterface %s/%s: %w", w.client.namespace, name, tokenErr)}
			}
		} else {
			w.write(ctx, name, batch)
		}
		cancel()
	}
}

// write applies the batch's changes, one after the other, to the NetworkInterface (the one
// this writer wrote last if the cache does not show it yet, else the cached one) and writes the
// result in one patch, for which a token is already taken.
func (w *nicWriter) write(ctx context.Context, name string, batch []*nicChange) {
	open := batch
	finish := func(change *nicChange, wrote bool, err error) {
		// A label conflict names the object already.
		if err != nil && !errors.Is(err, ErrLabelConflict) {
			err = fmt.Errorf("write NetworkInterface %s/%s: %w", w.client.namespace, name, err)
		}
		change.done <- nicOutcome{wrote: wrote, err: err}
	}
	finishAll := func(err error) {
		for _, change := range open {
			finish(change, false, err)
		}
	}
	cached, err := w.client.NetworkInterface(ctx, name)
	if err != nil {
		finishAll(err)
		return
	}
	// What this writer wrote itself is as new as the API server was then; it needs no
	// confirmation the way the cache does.
	base, live := w.newest(name, cached)
	haveToken := true
	backoff := conflictBackoff()
	for {
		changed, applied, unconfirmed := base.DeepCopy(), 0, false
		kept := open[:0]
		for _, change := range open {
			if err := change.ctx.Err(); err != nil {
				finish(change, false, err)
				continue
			}
			trial := changed.DeepCopy()
			did, err := change.mutate(trial)
			switch {
			case err != nil:
				finish(change, false, err)
				continue
			case did:
				changed = trial
				applied++
			case change.confirmNoChange && !live:
				unconfirmed = true
			default:
				finish(change, false, nil)
				continue
			}
			kept = append(kept, change)
		}
		open = kept
		if unconfirmed {
			// Confirm on the live object; every change is computed anew on it.
			fresh, err := w.readLive(ctx, name)
			if err != nil {
				finishAll(err)
				return
			}
			base, live = fresh, true
			continue
		}
		if applied == 0 {
			return
		}
		if !haveToken {
			if err := w.limiter.Wait(ctx); err != nil {
				finishAll(err)
				return
			}
		}
		haveToken = false
		patch, err := nicPatch(base, changed)
		if err != nil {
			finishAll(err)
			return
		}
		err = w.api.Patch(ctx, changed, client.RawPatch(types.JSONPatchType, patch))
		if err == nil {
			w.remember(changed)
			for _, change := range open {
				finish(change, true, nil)
			}
			return
		}
		if !isStaleRead(err) || backoff.Steps <= 1 {
			finishAll(err)
			return
		}
		// What was read is stale: read it afresh and compute the changes anew.
		time.Sleep(backoff.Step())
		fresh, err := w.readLive(ctx, name)
		if err != nil {
			finishAll(err)
			return
		}
		base, live = fresh, true
	}
}

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

// watch has the writer forget its writes as the cache's informer shows them.
func (w *nicWriter) watch(informer cache.Informer) error {
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
				w.seen(nic)
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

func (w *nicWriter) readLive(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	fresh, err := w.client.readLive(ctx, &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: w.client.namespace, Name: name}})
	if err != nil {
		return nil, err
	}
	nic, ok := fresh.(*networkingv1alpha1.NetworkInterface)
	if !ok {
		return nil, fmt.Errorf("read NetworkInterface %s/%s: got a %T", w.client.namespace, name, fresh)
	}
	return nic, nil
}

// nicPatch is the JSON patch from base to changed of the fields this CCM writes on a
// NetworkInterface: labels, spec.prefixes and the routes annotation. Each field it sets is
// first tested for its value in base (a missing value tests as null).
func nicPatch(base, changed *networkingv1alpha1.NetworkInterface) ([]byte, error) {
	ops := labelOps(base.Labels, changed.Labels)
	if !equality.Semantic.DeepEqual(base.Spec.Prefixes, changed.Spec.Prefixes) ||
		base.Annotations[keys.AnnotationRoutes] != changed.Annotations[keys.AnnotationRoutes] {
		ops = append(ops, prefixOps(base, changed)...)
	}
	return json.Marshal(ops)
}

// labelOps tests and sets the labels that differ between base and changed.
func labelOps(base, changed map[string]string) []jsonPatchOperation {
	if maps.Equal(base, changed) {
		return nil
	}
	if base == nil {
		return []jsonPatchOperation{
			{Op: "test", Path: "/metadata/labels", Value: nil},
			{Op: "add", Path: "/metadata/labels", Value: changed},
		}
	}
	var ops []jsonPatchOperation
	for _, key := range slices.Sorted(maps.Keys(base)) {
		if _, kept := changed[key]; !kept {
			path := "/metadata/labels/" + jsonPointerEscape(key)
			ops = append(ops, jsonPatchOperation{Op: "test", Path: path, Value: base[key]}, jsonPatchOperation{Op: "remove", Path: path})
		}
	}
	for _, key := range slices.Sorted(maps.Keys(changed)) {
		old, had := base[key]
		if had && old == changed[key] {
			continue
		}
		path := "/metadata/labels/" + jsonPointerEscape(key)
		var tested any
		if had {
			tested = old
		}
		ops = append(ops, jsonPatchOperation{Op: "test", Path: path, Value: tested}, jsonPatchOperation{Op: "add", Path: path, Value: changed[key]})
	}
	return ops
}

// nicWriterFor builds the writer of the client's NetworkInterfaces: its patches take their
// tokens from limiter themselves.
func nicWriterFor(c *Client, limiter flowcontrol.RateLimiter, api client.Client) *nicWriter {
	return &nicWriter{client: c, limiter: limiter, api: api}
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
