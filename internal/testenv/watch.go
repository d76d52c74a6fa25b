package testenv

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// ListAndWatch lists with list and hands the list to listed (if not nil), then hands changed,
// in order, every event of a watch that begins at that list and resumes after a dropped
// connection, until ctx ends: nothing changed after the list is missed, as a test that
// counts every change needs. The returned channel closes once changed has had the last event.
func ListAndWatch[L interface{ GetResourceVersion() string }](ctx context.Context,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error),
	listed func(L), changed func(watch.Event),
) (<-chan struct{}, error) {
	items, err := list(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	if listed != nil {
		listed(items)
	}
	watcher, err := watchtools.NewRetryWatcherWithContext(ctx, items.GetResourceVersion(), &toolscache.ListWatch{WatchFuncWithContext: watchFunc})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for event := range watcher.ResultChan() {
			changed(event)
		}
	}()
	return done, nil
}
