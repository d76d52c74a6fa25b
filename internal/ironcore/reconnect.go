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

// A reflector backs off up to 30 s after its API server was unreachable, sized for thousands of
// clients: after a 20 s IronCore outage, a new Service waited 17.7 s for the address IronCore had
// already given its LoadBalancer. The CCM's few watches can reconnect every second at no cost,
// so its informers retry such a failure within the call and the reflector never backs off.

// reconnectBackoff spaces the attempts of one list or watch while IronCore is unreachable.
func reconnectBackoff() wait.Backoff {
	return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 4, Cap: time.Second}
}

// unreachable tells whether a list or watch failed because IronCore cannot be reached or serve now.
func unreachable(err error) bool {
	return Transient(err) && !apierrors.IsTooManyRequests(err)
}

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

// retryWhileUnreachable calls call until it succeeds, fails otherwise, or ctx ends.
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
