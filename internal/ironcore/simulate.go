package ironcore

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
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
	decoder := serializer.NewCodecFactory(c.api.Scheme()).UniversalDeserializer()
	c.writeGate.RecordInstead(func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := record(req, next)
		if err == nil && resp.StatusCode < http.StatusMultipleChoices {
			if err := c.simulate(decoder, req, resp); err != nil {
				klog.V(2).InfoS("Dry run: an answered write does not reach the cache", "method", req.Method, "path", req.URL.Path, "err", err)
			}
		}
		return resp, err
	})
}

// simulate sends the object of an answered write to the cache's informers of its kind.
func (c *Client) simulate(decoder runtime.Decoder, req *http.Request, resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return err
	}
	info, err := newRequestInfoFactory().NewRequestInfo(req)
	if err != nil {
		return err
	}
	if info.Verb == "delete" {
		gvk, err := c.api.RESTMapper().KindFor(schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource})
		if err != nil {
			return err
		}
		object, err := c.api.Scheme().New(gvk)
		if err != nil {
			return err
		}
		store := c.informers.store(reflect.TypeOf(object))
		if store == nil {
			return nil
		}
		key := info.Name
		if info.Namespace != "" {
			key = info.Namespace + "/" + info.Name
		}
		if cached, ok, _ := store.GetByKey(key); ok {
			c.informers.simulated.publish(watch.Event{Type: watch.Deleted, Object: cached.(runtime.Object)})
		}
		return nil
	}
	object, _, err := decoder.Decode(body, nil, nil)
	if err != nil {
		return err
	}
	if _, isStatus := object.(*metav1.Status); isStatus {
		return nil
	}
	event := watch.Event{Type: watch.Modified, Object: object}
	if resp.StatusCode == http.StatusCreated {
		event.Type = watch.Added
	}
	c.informers.simulated.publish(event)
	return nil
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
		// The resource version the real watch has reached: a simulated object carries it, so
		// that the reflector resumes a watch from a real one. Until one is known (a watch
		// that begins with its initial list), simulated events wait.
		reached := options.ResourceVersion
		for {
			var waiting <-chan watch.Event
			if reached != "" && reached != "0" {
				waiting = simulated
			}
			var event watch.Event
			select {
			case e, ok := <-real.ResultChan():
				if !ok {
					return
				}
				if object, err := meta.Accessor(e.Object); err == nil && object.GetResourceVersion() != "" {
					reached = object.GetResourceVersion()
				}
				event = e
			case e := <-waiting:
				event = watch.Event{Type: e.Type, Object: e.Object.DeepCopyObject()}
				if object, err := meta.Accessor(event.Object); err == nil {
					object.SetResourceVersion(reached)
				}
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
