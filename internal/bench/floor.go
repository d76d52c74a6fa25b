package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// floorPrefix starts the names of the floor's LoadBalancers, which no CCM makes.
const floorPrefix = "floor-"

func floorName(i int) string      { return fmt.Sprintf("%s%04d", floorPrefix, i) }
func floorKey(name string) string { return "floor/" + name }

// measureFloor times how long IronCore and the simulated providers alone take to give n
// LoadBalancers an address when they are created at once, as a CCM would create them for n
// plain Services: the floor no CCM can beat on this stack. It runs before the CCM starts, and
// deletes the LoadBalancers and waits until they and their routings are gone, so that they
// neither cost the CCM's run anything nor count in it.
func measureFloor(ctx context.Context, stack *testenv.Stack, n int, progress io.Writer) (Timings, error) {
	// The watch must end before the stack stops (see Run).
	ctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	watch := newStopwatch(n)
	lbCache, err := cache.New(stack.IronCore.Config, cache.Options{
		Scheme:            stack.IronCore.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{stack.Namespace: {}},
	})
	if err != nil {
		return Timings{}, err
	}
	informer, err := lbCache.GetInformer(ctx, &networkingv1alpha1.LoadBalancer{})
	if err != nil {
		return Timings{}, fmt.Errorf("watch LoadBalancers: %w", err)
	}
	if _, err := informer.AddEventHandler(onAddOrUpdate(func(obj any) {
		if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok && len(lb.Status.IPs) > 0 {
			watch.done(floorKey(lb.Name))
		}
	})); err != nil {
		return Timings{}, err
	}
	go func() { _ = lbCache.Start(ctx) }()
	if !lbCache.WaitForCacheSync(ctx) {
		return Timings{}, fmt.Errorf("the LoadBalancer cache did not sync")
	}

	err = parallel(n, func(i int) error {
		lb := floorLoadBalancer(stack, floorName(i))
		watch.created(floorKey(lb.Name))
		if err := stack.IronCore.Client.Create(ctx, lb); err != nil {
			return fmt.Errorf("create LoadBalancer %s: %w", lb.Name, err)
		}
		return nil
	})
	if err != nil {
		return Timings{}, err
	}
	err = watch.wait(ctx, 10*time.Minute, progress, func() string {
		return fmt.Sprintf("floor LoadBalancers with addresses %d/%d", watch.count("floor/"), n)
	})
	if err != nil {
		return Timings{}, err
	}
	timings := newTimings(watch.durations("floor/"))
	return timings, deleteFloor(ctx, stack, n)
}

// floorLoadBalancer has the shape this CCM gives the LoadBalancer of a plain Service with one
// TCP port, without the owner labels and annotations: no CCM is to take it for its own.
func floorLoadBalancer(stack *testenv.Stack, name string) *networkingv1alpha1.LoadBalancer {
	tcp := corev1.ProtocolTCP
	return &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
			NetworkInterfaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				keys.LabelCluster:            stack.ClusterName,
				keys.LabelLoadBalancerTarget: stack.ClusterName,
			}},
			Ports: []networkingv1alpha1.LoadBalancerPort{{Protocol: &tcp, Port: 80}},
		},
	}
}

// deleteFloor deletes the floor's LoadBalancers and waits until they are gone, after the
// simulated apinetlet's finalizer, and their routings too, after the garbage collector.
func deleteFloor(ctx context.Context, stack *testenv.Stack, n int) error {
	err := parallel(n, func(i int) error {
		lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: floorName(i)}}
		if err := stack.IronCore.Client.Delete(ctx, lb); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete LoadBalancer %s: %w", lb.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return testenv.WaitFor(ctx, 5*time.Minute, fmt.Sprintf("the %d floor LoadBalancers and their routings to be gone", n), func(ctx context.Context) error {
		lbs := &networkingv1alpha1.LoadBalancerList{}
		routings := &networkingv1alpha1.LoadBalancerRoutingList{}
		for _, list := range []client.ObjectList{lbs, routings} {
			if err := stack.IronCore.Client.List(ctx, list, client.InNamespace(stack.Namespace)); err != nil {
				return err
			}
		}
		left := 0
		for _, lb := range lbs.Items {
			if strings.HasPrefix(lb.Name, floorPrefix) {
				left++
			}
		}
		for _, routing := range routings.Items {
			if strings.HasPrefix(routing.Name, floorPrefix) {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d LoadBalancers and routings left", left)
		}
		return nil
	})
}
