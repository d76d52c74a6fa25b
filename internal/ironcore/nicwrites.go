package ironcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// A new Node's NetworkInterface gets the cluster label, the load balancer target label and its
// pod route from three controllers within seconds of each other. Written one by one, that is
// three patches, and every patch of a NetworkInterface makes IronCore's controller-manager
// reconcile every LoadBalancer. nicWriter combines them: a change is recorded under its
// NetworkInterface's name, and the name is a work item on a client-go queue. A worker takes
// the name, waits for a token of the client's rate limiter, and then writes every change
// recorded by then in one JSON patch. An idle client has a token at once, so a lone change is
// not delayed; in a burst, the changes that come while the queue drains share one write. The
// queue hands a name to one worker at a time, so writes of one NetworkInterface never race.
//
// The patch tests every field it sets for the value it was computed from, so a concurrent
// change to one of them (by another writer, or a cache that lagged) fails it; the changes then
// go back on the queue, rate limited, to be computed anew on the object read from the API
// server. Changes to anything else on the NetworkInterface (status, other labels) do not get
// in the way. Nothing is lost: each change is applied to the result of the ones before it.
type nicWriter struct {
	client *Client
	// limiter is the client's rate limiter; api makes the patches without taking another token.
	limiter flowcontrol.RateLimiter
	api     client.Client
	// queue holds the names of the NetworkInterfaces with changes to write; its rate limiter
	// spaces out the retries after a stale read.
	queue workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// waiting holds the changes not yet taken by a write, by NetworkInterface name.
	waiting map[string][]*nicChange
	// stale names the NetworkInterfaces whose last patch failed on a stale read: their next
	// write starts from the object read from the API server.
	stale map[string]bool
	// stopped is set when the queue shuts down; a change after it fails at once.
	stopped bool
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

const (
	// nicWriteTimeout bounds one write of a NetworkInterface, its wait for a token included.
	nicWriteTimeout = time.Minute
	// nicWriteWorkers write NetworkInterfaces in parallel: enough to spend the client's
	// budget (each write waits for its token first) at a few hundred requests a second.
	nicWriteWorkers = 32
	// nicWriteRetries bounds the retries of a change after stale reads; many writers may
	// contend for one NetworkInterface (dual-stack routes are written in parallel, and
	// apinetlet writes status).
	nicWriteRetries = 10
)

// nicWriterFor builds the writer of the client's NetworkInterfaces: its patches take their
// tokens from limiter themselves. It writes once run is called.
func nicWriterFor(c *Client, limiter flowcontrol.RateLimiter, api client.Client) *nicWriter {
	return &nicWriter{
		client:  c,
		limiter: limiter,
		api:     api,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Millisecond, time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ironcore-networkinterface-writes"}),
	}
}

// run writes NetworkInterfaces until ctx ends; then every change not yet written fails.
func (w *nicWriter) run(ctx context.Context) {
	var workers sync.WaitGroup
	for range nicWriteWorkers {
		workers.Go(func() {
			for w.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	w.mu.Lock()
	w.stopped = true
	waiting := w.waiting
	w.waiting = nil
	w.mu.Unlock()
	w.queue.ShutDown()
	workers.Wait()
	for name, changes := range waiting {
		for _, change := range changes {
			change.done <- nicOutcome{err: fmt.Errorf("write NetworkInterface %s/%s: the IronCore client stopped", w.client.namespace, name)}
		}
	}
}

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
	if w.stopped {
		w.mu.Unlock()
		return false, fmt.Errorf("write NetworkInterface %s/%s: the IronCore client stopped", w.client.namespace, name)
	}
	if w.waiting == nil {
		w.waiting = map[string][]*nicChange{}
	}
	w.waiting[name] = append(w.waiting[name], change)
	w.mu.Unlock()
	w.queue.Add(name)
	select {
	case outcome := <-change.done:
		return outcome.wrote, outcome.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// processNext writes the changes waiting for the next name on the queue, and reports whether
// the queue is still running.
func (w *nicWriter) processNext(ctx context.Context) bool {
	name, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(name)
	// A name queued again while its changes were being written may find none left: it is not
	// worth a token.
	if w.waitingFor(name) == 0 {
		w.queue.Forget(name)
		return true
	}
	writeCtx, cancel := context.WithTimeout(ctx, nicWriteTimeout)
	defer cancel()
	// The token first: changes that come while it is awaited join this write.
	tokenErr := w.limiter.Wait(writeCtx)
	batch, stale := w.take(name)
	if tokenErr != nil {
		for _, change := range batch {
			change.done <- nicOutcome{err: fmt.Errorf("write NetworkInterface %s/%s: %w", w.client.namespace, name, tokenErr)}
		}
		w.queue.Forget(name)
		return true
	}
	retry := w.write(writeCtx, name, batch, stale)
	if len(retry) == 0 {
		w.queue.Forget(name)
		return true
	}
	if w.queue.NumRequeues(name) >= nicWriteRetries {
		for _, change := range retry {
			change.done <- nicOutcome{err: fmt.Errorf("write NetworkInterface %s/%s: it kept changing under the write", w.client.namespace, name)}
		}
		w.queue.Forget(name)
		return true
	}
	w.putBack(name, retry)
	w.queue.AddRateLimited(name)
	return true
}

func (w *nicWriter) waitingFor(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting[name])
}

// take returns the changes waiting for the named NetworkInterface, and whether its last
// patch failed on a stale read.
func (w *nicWriter) take(name string) ([]*nicChange, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	batch, stale := w.waiting[name], w.stale[name]
	delete(w.waiting, name)
	delete(w.stale, name)
	return batch, stale
}

// putBack returns changes that met a stale read to the front of the named NetworkInterface's
// waiting changes, and has its next write read it from the API server. After the queue
// stopped, they fail.
func (w *nicWriter) putBack(name string, changes []*nicChange) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		for _, change := range changes {
			change.done <- nicOutcome{err: fmt.Errorf("write NetworkInterface %s/%s: the IronCore client stopped", w.client.namespace, name)}
		}
		return
	}
	if w.waiting == nil {
		w.waiting = map[string][]*nicChange{}
	}
	if w.stale == nil {
		w.stale = map[string]bool{}
	}
	w.waiting[name] = append(changes, w.waiting[name]...)
	w.stale[name] = true
}

// write applies the batch's changes, one after the other, to the NetworkInterface (read from
// the API server if stale, else the one this writer wrote last if the cache does not show it
// yet, else the cached one) and writes the result in one patch, for which a token is already
// taken. It returns the changes to retry because the patch met a stale read.
func (w *nicWriter) write(ctx context.Context, name string, batch []*nicChange, stale bool) []*nicChange {
	open := batch
	finish := func(change *nicChange, wrote bool, err error) {
		// A label conflict names the object already.
		if err != nil && !errors.Is(err, ErrLabelConflict) {
			err = fmt.Errorf("write NetworkInterface %s/%s: %w", w.client.namespace, name, err)
		}
		change.done <- nicOutcome{wrote: wrote, err: err}
	}
	finishAll := func(err error) []*nicChange {
		for _, change := range open {
			finish(change, false, err)
		}
		return nil
	}
	var base *networkingv1alpha1.NetworkInterface
	var live bool
	if stale {
		fresh, err := w.readLive(ctx, name)
		if err != nil {
			return finishAll(err)
		}
		base, live = fresh, true
	} else {
		cached, err := w.client.NetworkInterface(ctx, name)
		if err != nil {
			return finishAll(err)
		}
		// What this writer wrote itself is as new as the API server was then; it needs no
		// confirmation the way the cache does.
		base, live = w.newest(name, cached)
	}
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
				return finishAll(err)
			}
			base, live = fresh, true
			continue
		}
		if applied == 0 {
			return nil
		}
		patch, err := nicPatch(base, changed)
		if err != nil {
			return finishAll(err)
		}
		err = w.api.Patch(ctx, changed, client.RawPatch(types.JSONPatchType, patch))
		switch {
		case err == nil:
			w.remember(changed)
			w.forgetIfCached(ctx, changed)
			for _, change := range open {
				finish(change, true, nil)
			}
			return nil
		case isStaleRead(err):
			return open
		default:
			return finishAll(err)
		}
	}
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

// gone forgets the write to a deleted NetworkInterface: the cache may never show that write
// (a relist after a lost watch finds the NetworkInterface gone), and nothing asks for it again.
// A write to a newer NetworkInterface of the same name is kept.
func (w *nicWriter) gone(nic *networkingv1alpha1.NetworkInterface) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if written, ok := w.written[nic.Name]; ok && written.UID == nic.UID {
		delete(w.written, nic.Name)
	}
}

// forgetIfCached forgets the write just remembered if the cache shows it already, or shows the
// NetworkInterface gone: the cache's event may have come before the write was remembered.
func (w *nicWriter) forgetIfCached(ctx context.Context, written *networkingv1alpha1.NetworkInterface) {
	cached, err := w.client.NetworkInterface(ctx, written.Name)
	switch {
	case errors.Is(err, ErrNotFound):
		w.gone(written)
	case err == nil:
		w.seen(cached)
	}
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
