package ironcore

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// A reflector whose list or watch fails because its API server cannot be reached waits before
// the next attempt, twice as long each time, up to 30 s: sized for thousands of clients of one
// kube-apiserver. For the CCM that is the wait after an IronCore outage before its caches see
// anything again: after 20 s unreachable, a new Service waited 17.7 s for the address IronCore
// had already given its LoadBalancer (benchmark history in git). The CCM's few watches of IronCore can
// reconnect every second at no cost to anyone, so its informers list and watch through
// reconnecting, which retries such a failure within the call, at most a second apart, and so
// never lets the reflector back off for it.

// reconnectBackoff spaces the attempts of one list or watch while IronCore is unreachable.
func reconnectBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 4, Cap: time.Second}
}

// unreachable tells whether a list or watch failed because the IronCore API could not be
// reached or answered that it cannot serve now, rather than with an answer about the request.
func unreachable(err error) bool {
	return Transient(err) && !apierrors.IsTooManyRequests(err)
}

// reconnecting is a ListerWatcher whose lists and watches retry while IronCore is unreachable.
type reconnecting struct {
	toolscache.ListerWatcherWithContext
}

// Reconnecting wraps lw as described above.
func Reconnecting(lw toolscache.ListerWatcher) toolscache.ListerWatcher {
	return &reconnecting{ListerWatcherWithContext: toolscache.ToListerWatcherWithContext(lw)}
}

func (r *reconnecting) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	return retryWhileUnreachable(ctx, func() (runtime.Object, error) { return r.ListerWatcherWithContext.ListWithContext(ctx, options) })
}

func (r *reconnecting) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	return retryWhileUnreachable(ctx, func() (watch.Interface, error) { return r.ListerWatcherWithContext.WatchWithContext(ctx, options) })
}

// List and Watch serve callers without a context; they do not retry, as nothing could stop them.
func (r *reconnecting) List(options metav1.ListOptions) (runtime.Object, error) {
	return r.ListerWatcherWithContext.ListWithContext(context.Background(), options)
}

func (r *reconnecting) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return r.ListerWatcherWithContext.WatchWithContext(context.Background(), options)
}

// retryWhileUnreachable calls call until it succeeds, fails otherwise, or ctx ends; on the last,
// it returns the last failure.
func retryWhileUnreachable[T any](ctx context.Context, call func() (T, error)) (T, error) {
	backoff := reconnectBackoff()
	for {
		result, err := call()
		if err == nil || !unreachable(err) {
			return result, err
		}
		timer := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			timer.Stop()
			return result, err
		case <-timer.C:
		}
	}
}
