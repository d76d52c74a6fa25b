package ironcore

import (
	"context"
	"reflect"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// oneWatch is a ListerWatcher whose watch is the one given.
type oneWatch struct{ watch watch.Interface }

func (o oneWatch) ListWithContext(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return &networkingv1alpha1.LoadBalancerList{}, nil
}

func (o oneWatch) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return o.watch, nil
}

func loadBalancerAt(name, resourceVersion string) *networkingv1alpha1.LoadBalancer {
	return &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: resourceVersion}}
}

// TestASimulatedEventCarriesTheResourceVersionTheWatchReached: an answered write reaches the
// informer's watch only once the real watch has reached a resource version, and carries that
// one, so that the reflector resumes a watch from a version the API server gave.
func TestASimulatedEventCarriesTheResourceVersionTheWatchReached(t *testing.T) {
	events := &simulatedEvents{}
	real := watch.NewFake()
	lw := &simulatedListWatch{ListerWatcherWithContext: oneWatch{real}, events: events, kind: reflect.TypeOf(&networkingv1alpha1.LoadBalancer{})}
	merged, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer merged.Stop()
	// Published before the watch has reached a version (it began with its initial list).
	events.publish(watch.Event{Type: watch.Modified, Object: loadBalancerAt("written", "3")})
	go real.Modify(loadBalancerAt("other", "7"))

	first := <-merged.ResultChan()
	second := <-merged.ResultChan()
	if got := first.Object.(*networkingv1alpha1.LoadBalancer); got.Name != "other" {
		t.Errorf("the first event is of %s, want the real one of other", got.Name)
	}
	got := second.Object.(*networkingv1alpha1.LoadBalancer)
	if got.Name != "written" || got.ResourceVersion != "7" {
		t.Errorf("the simulated event is of %s at version %q, want written at 7, the version the watch reached", got.Name, got.ResourceVersion)
	}
}
