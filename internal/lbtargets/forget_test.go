package lbtargets_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// waitForCount waits until count says want.
func waitForCount(t *testing.T, what string, count func() int, want int) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), time.Minute, fmt.Sprintf("%s: %d", what, want), func(context.Context) error {
		if got := count(); got != want {
			return fmt.Errorf("%d", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// routedService creates a Service and its LoadBalancer, and waits until the controller has
// written the routing.
func routedService(t *testing.T, controller *lbtargets.Controller, name string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	service, err := stack.CreateLoadBalancerService(context.Background(), name, testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Services(service.Namespace).Delete(context.Background(), service.Name, metav1.DeleteOptions{})
	})
	lb := loadBalancerFor(t, service)
	waitForCount(t, "routings remembered", controller.RoutingsRemembered, 1)
	return lb
}

// A LoadBalancer deleted by someone else than the provider (the orphan collector releasing a
// retained one, a hand) leaves no record of its routing behind.
func TestTheRoutingOfALoadBalancerDeletedByOthersIsForgotten(t *testing.T) {
	controller := start(t)
	lb := routedService(t, controller, "forget-deleted-lb")
	if err := stack.IronCore.Client.Delete(context.Background(), lb); err != nil {
		t.Fatal(err)
	}
	waitForCount(t, "routings remembered", controller.RoutingsRemembered, 0)
}

// A routing write that ends after its LoadBalancer's deletion reached the cache is not
// remembered either: the delete event came before the record.
func TestARoutingWrittenAsItsLoadBalancerIsDeletedIsForgotten(t *testing.T) {
	controller := start(t)
	lb := routedService(t, controller, "forget-meanwhile")
	ctx := context.Background()
	// The routing deleted by hand is written again; its LoadBalancer is deleted, and the
	// controller's cache shows it gone, while that write waits in the proxy.
	deleted := make(chan error, 1)
	cancel := stack.IronCoreProxy.OnWrite(func(write apiproxy.Write) bool {
		if write.Resource != "loadbalancerroutings.networking.ironcore.dev" || write.Name != lb.Name {
			return false
		}
		deleted <- errors.Join(client.IgnoreNotFound(stack.IronCore.Client.Delete(ctx, lb)),
			testenv.WaitFor(ctx, time.Minute, "the LoadBalancer gone from the controller's cache", func(ctx context.Context) error {
				_, err := controller.IronCoreCache().LoadBalancer(ctx, lb.Name)
				switch {
				case err == nil:
					return errors.New("still cached")
				case errors.Is(err, ironcore.ErrNotFound):
					return nil
				}
				return err
			}))
		return true
	})
	t.Cleanup(cancel)
	// The sync counts its write as changed only after recording it, and forgetting it again.
	metrics.Register() // unregistered, the counter counts nothing
	changed := func() float64 {
		value, err := testutil.GetCounterMetricValue(metrics.LoadBalancerRoutingSyncs.WithLabelValues("changed"))
		if err != nil {
			t.Fatal(err)
		}
		return value
	}
	before := changed()
	routing := &networkingv1alpha1.LoadBalancerRouting{ObjectMeta: metav1.ObjectMeta{Namespace: lb.Namespace, Name: lb.Name}}
	if err := stack.IronCore.Client.Delete(ctx, routing); err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, time.Minute, "the routing write counted", func(context.Context) error {
		if changed() == before {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := controller.RoutingsRemembered(); n != 0 {
		t.Errorf("%d routings remembered, want 0", n)
	}
}

// A deleted Service leaves no record of its routing key behind, though its LoadBalancer stays
// (retained, say) and no event of it queues the key again.
func TestADeletedServicesRoutingKeyIsForgotten(t *testing.T) {
	controller := start(t)
	service, err := stack.CreateLoadBalancerService(context.Background(), "forget-service", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loadBalancerFor(t, service)
	remembered := func() int { return controller.RoutingKeysRemembered(service.Namespace, service.Name) }
	if err := testenv.WaitFor(context.Background(), time.Minute, "the Service's routing key remembered", func(context.Context) error {
		if remembered() == 0 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := stack.TargetClientset.CoreV1().Services(service.Namespace).Delete(context.Background(), service.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForCount(t, "records of the Service's routing key", remembered, 0)
}
