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

// nicWriter combines the changes due for a NetworkInterface into one patch: a new Node's gets
// three from three controllers within seconds, and every patch of a NetworkInterface makes
// IronCore reconcile every LoadBalancer. A worker takes a name off the queue, waits for a token
// (at once when idle), and writes every change recorded by then; the queue never hands one name
// to two workers.
//
// The patch tests every field it sets for the value it was computed from, so a concurrent change
// to one of them fails it; the changes are then retried on the object read from the API server.
type nicWriter struct {
	client *Client
	// limiter is the client's rate limiter; api makes the patches without taking another token.
	limiter flowcontrol.RateLimiter
	api     client.Client
	queue   workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	waiting map[string][]*nicChange
	// stale names the NetworkInterfaces whose next write starts from a live read.
	stale   map[string]bool
	stopped bool
	// written holds each NetworkInterface as last written until the cache shows it: a change
	// computed on an older cached copy would fail the patch's tests.
	written map[string]*networkingv1alpha1.NetworkInterface
	// riders change every NetworkInterface written anyway, never one that is not (see
	// Client.RideAlong).
	riders []func(base, changed *networkingv1alpha1.NetworkInterface) bool
}

// nicChange is one caller's change to a NetworkInterface.
type nicChange struct {
	ctx context.Context
	// mutate changes the NetworkInterface in place and reports whether it changed anything.
	mutate func(*networkingv1alpha1.NetworkInterface) (bool, error)
	// confirmNoChange has "nothing to change" on the cached object confirmed live.
	confirmNoChange bool
	// done has room for the outcome, so the writer never blocks.
	done chan nicOutcome
}

type nicOutcome struct {
	wrote bool
	err   error
}

const (
	// nicWriteTimeout bounds one write, its wait for a token included.
	nicWriteTimeout = time.Minute
	// nicWriteWorkers are enough to spend a budget of a few hundred requests a second.
	nicWriteWorkers = 32
	// nicWriteRetries bounds the retries after stale reads; dual-stack routes are written in
	// parallel, and apinetlet writes status.
	nicWriteRetries = 10
)

// nicWriterFor builds the writer; its patches take their tokens from limiter themselves.
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

func (w *nicWriter) waitingChanges() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, changes := range w.waiting {
		n += len(changes)
	}
	return n
}

// change submits a change and waits for whether it was written. If ctx ends first, the change
// may still be written.
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

// later records a change to be written with the next write of the named NetworkInterface, or on
// its own once wait has passed, and returns at once; done, if not nil, gets the outcome. The
// change outlives ctx's cancellation: it is written, if at all, within the writer's own bounds.
func (w *nicWriter) later(ctx context.Context, name string, wait time.Duration, mutate func(*networkingv1alpha1.NetworkInterface) (bool, error), done func(wrote bool, err error)) {
	change := &nicChange{ctx: context.WithoutCancel(ctx), mutate: mutate, done: make(chan nicOutcome, 1)}
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		if done != nil {
			done(false, fmt.Errorf("write NetworkInterface %s/%s: the IronCore client stopped", w.client.namespace, name))
		}
		return
	}
	if w.waiting == nil {
		w.waiting = map[string][]*nicChange{}
	}
	w.waiting[name] = append(w.waiting[name], change)
	w.mu.Unlock()
	if done != nil {
		go func() {
			outcome := <-change.done
			done(outcome.wrote, outcome.err)
		}()
	}
	w.queue.AddAfter(name, wait)
}

// processNext writes the next name's changes, and reports whether the queue still runs.
func (w *nicWriter) processNext(ctx context.Context) bool {
	name, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(name)
	// A name queued again during its write may have no changes left, not worth a token.
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

func (w *nicWriter) take(name string) ([]*nicChange, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	batch, stale := w.waiting[name], w.stale[name]
	delete(w.waiting, name)
	delete(w.stale, name)
	return batch, stale
}

// putBack queues changes that met a stale read first again, for a write on a live read.
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

// write applies the batch's changes in turn, to the newest NetworkInterface known, and writes
// them in one patch. It returns the changes to retry because the patch met a stale read.
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
		// What this writer wrote needs no confirmation the way the cache does.
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
		changed = w.ride(base, changed)
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

// ride applies the riders to a NetworkInterface about to be written.
func (w *nicWriter) ride(base, changed *networkingv1alpha1.NetworkInterface) *networkingv1alpha1.NetworkInterface {
	w.mu.Lock()
	riders := w.riders
	w.mu.Unlock()
	for _, rider := range riders {
		if trial := changed.DeepCopy(); rider(base, trial) {
			changed = trial
		}
	}
	return changed
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

// gone forgets the write to a deleted NetworkInterface, which the cache may never show; a
// write to a newer one of the same name is kept.
func (w *nicWriter) gone(nic *networkingv1alpha1.NetworkInterface) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if written, ok := w.written[nic.Name]; ok && written.UID == nic.UID {
		delete(w.written, nic.Name)
	}
}

// forgetIfCached forgets the write just remembered if the cache shows it, or the object gone:
// the cache's event may have come first.
func (w *nicWriter) forgetIfCached(ctx context.Context, written *networkingv1alpha1.NetworkInterface) {
	cached, err := w.client.NetworkInterface(ctx, written.Name)
	switch {
	case errors.Is(err, ErrNotFound):
		w.gone(written)
	case err == nil:
		w.seen(cached)
	}
}

// nicPatch is the JSON patch from base to changed of labels, spec.prefixes and the routes
// annotation, each tested first for its value in base.
func nicPatch(base, changed *networkingv1alpha1.NetworkInterface) ([]byte, error) {
	ops := labelOps(base.Labels, changed.Labels)
	if !equality.Semantic.DeepEqual(base.Spec.Prefixes, changed.Spec.Prefixes) ||
		base.Annotations[keys.AnnotationRoutes] != changed.Annotations[keys.AnnotationRoutes] {
		ops = append(ops, prefixOps(base, changed)...)
	}
	return json.Marshal(ops)
}

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
