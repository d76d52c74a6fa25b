package ironcore

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
)

// RecordWrites hands every write to record instead of the API server (a dry run), which
// answers it. Each answered write also reaches this client's cache as a watch event would, so
// that the writes that follow from it are decided (the routing after the LoadBalancer that
// stops selecting): until the object changes on IronCore, the cache shows it as written. Call
// it before RegisterInformers. Reads are not affected.
func (c *Client) RecordWrites(record writegate.Recorder) {
	c.informers.simulated = &simulatedEvents{}
	c.writeGate.RecordInstead(func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := record(req, next)
		if err == nil && resp.StatusCode < http.StatusMultipleChoices {
			c.simulate(req, resp)
		}
		return resp, err
	})
}

// simulate sends the object of an answered write to the cache's informers of its kind.
func (c *Client) simulate(req *http.Request, resp *http.Response) {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return
	}
	info, err := newRequestInfoFactory().NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return
	}
	if info.Verb == "delete" {
		gvk, err := c.api.RESTMapper().KindFor(schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource})
		if err != nil {
			return
		}
		object, err := c.api.Scheme().New(gvk)
		if err != nil {
			return
		}
		store := c.informers.store(reflect.TypeOf(object))
		if store == nil {
			return
		}
		if cached, ok, _ := store.GetByKey(info.Namespace + "/" + info.Name); ok {
			c.informers.simulated.publish(watch.Event{Type: watch.Deleted, Object: cached.(runtime.Object)})
		}
		return
	}
	object, _, err := serializer.NewCodecFactory(c.api.Scheme()).UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		klog.V(2).InfoS("Dry run: an answered write does not reach the cache", "resource", info.Resource, "name", info.Name, "err", err)
		return
	}
	if _, isStatus := object.(*metav1.Status); isStatus {
		return
	}
	event := watch.Event{Type: watch.Modified, Object: object}
	if resp.StatusCode == http.StatusCreated {
		event.Type = watch.Added
	}
	c.informers.simulated.publish(event)
}

// simulatedEvents passes the objects of a dry run's answered writes to the watches of the
// cache's informers of their kinds.
type simulatedEvents struct {
	mu       sync.Mutex
	watchers map[reflect.Type]map[chan watch.Event]bool
}

// simulatedBuffer bounds the events waiting for one watch; past it, events are dropped: the
// write is decided again at the next sync, and recorded once all the same.
const simulatedBuffer = 1024

func (s *simulatedEvents) publish(event watch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for watcher := range s.watchers[reflect.TypeOf(event.Object)] {
		select {
		case watcher <- event:
		default:
			klog.InfoS("Dry run: the cache missed an answered write, its watch is behind", "type", reflect.TypeOf(event.Object).String())
		}
	}
}

func (s *simulatedEvents) subscribe(t reflect.Type) chan watch.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchers == nil {
		s.watchers = map[reflect.Type]map[chan watch.Event]bool{}
	}
	if s.watchers[t] == nil {
		s.watchers[t] = map[chan watch.Event]bool{}
	}
	events := make(chan watch.Event, simulatedBuffer)
	s.watchers[t][events] = true
	return events
}

func (s *simulatedEvents) unsubscribe(t reflect.Type, events chan watch.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.watchers[t], events)
}

// simulatedListWatch is a ListerWatcher whose watches also carry the simulated events of its
// kind.
type simulatedListWatch struct {
	toolscache.ListerWatcherWithContext
	events *simulatedEvents
	kind   reflect.Type
}

func (l *simulatedListWatch) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	real, err := l.ListerWatcherWithContext.WatchWithContext(ctx, options)
	if err != nil {
		return nil, err
	}
	merged := &mergedWatch{real: real, result: make(chan watch.Event), stopped: make(chan struct{})}
	simulated := l.events.subscribe(l.kind)
	go func() {
		defer close(merged.result)
		defer l.events.unsubscribe(l.kind, simulated)
		for {
			var event watch.Event
			select {
			case e, ok := <-real.ResultChan():
				if !ok {
					return
				}
				event = e
			case event = <-simulated:
			case <-merged.stopped:
				return
			}
			select {
			case merged.result <- event:
			case <-merged.stopped:
				return
			}
		}
	}()
	return merged, nil
}

func (l *simulatedListWatch) List(options metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), options)
}

func (l *simulatedListWatch) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), options)
}

// mergedWatch is a real watch with simulated events mixed in.
type mergedWatch struct {
	real     watch.Interface
	result   chan watch.Event
	stopped  chan struct{}
	stopOnce sync.Once
}

func (w *mergedWatch) Stop() {
	w.stopOnce.Do(func() {
		w.real.Stop()
		close(w.stopped)
	})
}

func (w *mergedWatch) ResultChan() <-chan watch.Event { return w.result }
