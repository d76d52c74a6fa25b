package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// Prefixes of the names of the floor's LoadBalancers, which no CCM makes: those timed on an
// idle IronCore, and those timed while the burst's NetworkInterfaces get their labels.
const (
	floorPrefix      = "floor-"
	burstFloorPrefix = "burstfloor-"
)

// The stopwatch keys of a floor LoadBalancer: its address, and its routing holding a first
// and every labelled NetworkInterface.
func floorAddressKey(name string) string  { return "address/" + name }
func floorFirstKey(name string) string    { return "first/" + name }
func floorCompleteKey(name string) string { return "complete/" + name }

// measureFloor times how long IronCore and the simulated providers alone take to give n
// LoadBalancers an address when they are created at once, as a CCM would create them for n
// plain Services: the floor no CCM can beat on this stack. It runs before the CCM starts, and
// deletes the LoadBalancers and waits until they and their routings are gone, so that they
// neither cost the CCM's run anything nor count in it.
func measureFloor(ctx context.Context, stack *testenv.Stack, n int, progress io.Writer) (Timings, error) {
	floor, err := timeFloor(ctx, stack, floorPrefix, n, nil, progress)
	return floor.Address, err
}

// BurstFloor is IronCore's own pace for as many LoadBalancers as Services, created at once
// while the least a CCM must write for the burst's Nodes goes in: one patch per
// NetworkInterface with the cluster and target labels the LoadBalancers select and, as the
// CCM's routes give each Node's NetworkInterface, a pod CIDR prefix.
type BurstFloor struct {
	// LabelsWritten is from the start until every NetworkInterface patch returned.
	LabelsWritten Seconds `json:"labelsWrittenSeconds"`
	// Routes tells whether each patch also gave its NetworkInterface a pod CIDR; runs before it
	// did wrote the labels only.
	Routes bool `json:"routes,omitempty"`
	// Address, FirstDestination and RoutingComplete are from each LoadBalancer's creation
	// until it has an address, its routing holds a NetworkInterface, and every one.
	Address          Timings `json:"address"`
	FirstDestination Timings `json:"firstDestination"`
	RoutingComplete  Timings `json:"routingComplete"`
	// FirstTraffic is from creation until both an address and a first destination.
	FirstTraffic Timings `json:"firstTraffic"`
}

// floorPodCIDR is the pod CIDR the burst floor gives the i-th NetworkInterface: in 10.64.0.0/10,
// outside the burst's own (podCIDR), so that none is mistaken for a route of the CCM's run.
func floorPodCIDR(i int) string {
	return fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)
}

// measureBurstFloor times IronCore alone on n LoadBalancers created while every
// NetworkInterface of the stack gets the labels they select and a pod CIDR, and returns the
// NetworkInterfaces to their labels and prefixes before, once the LoadBalancers are gone.
func measureBurstFloor(ctx context.Context, stack *testenv.Stack, n int, progress io.Writer) (BurstFloor, error) {
	nics := &networkingv1alpha1.NetworkInterfaceList{}
	if err := stack.IronCore.Client.List(ctx, nics, client.InNamespace(stack.Namespace)); err != nil {
		return BurstFloor{}, fmt.Errorf("list the Nodes' NetworkInterfaces: %w", err)
	}
	floor, err := timeFloor(ctx, stack, burstFloorPrefix, n, nics.Items, progress)
	if err != nil {
		return floor, err
	}
	floor.Routes = true
	return floor, parallel(len(nics.Items), func(i int) error {
		return patchBurstNetworkInterface(ctx, stack, nics.Items[i].Name, nil, "")
	})
}

// patchBurstNetworkInterface sets, in one patch, the cluster and target labels of a
// NetworkInterface to cluster and its prefixes to the pod CIDR, or removes both if cluster is
// nil.
func patchBurstNetworkInterface(ctx context.Context, stack *testenv.Stack, name string, cluster *string, podCIDR string) error {
	var prefixes any
	if cluster != nil {
		prefixes = []map[string]string{{"value": podCIDR}}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]*string{keys.LabelCluster: cluster, keys.LabelLoadBalancerTarget: cluster}},
		"spec":     map[string]any{"prefixes": prefixes},
	})
	if err != nil {
		return err
	}
	nic := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}
	if err := stack.IronCore.Client.Patch(ctx, nic, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("label NetworkInterface %s and give it a pod CIDR: %w", name, err)
	}
	return nil
}

// timeFloor creates n LoadBalancers named with prefix at once, while it labels the given
// NetworkInterfaces as targets, and times their addresses and, if it labels any, their
// routings. Then it deletes them and waits until they and their routings are gone.
func timeFloor(ctx context.Context, stack *testenv.Stack, prefix string, n int, nics []networkingv1alpha1.NetworkInterface, progress io.Writer) (BurstFloor, error) {
	// The watches must end before the stack stops (see Run).
	ctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	keysPerLoadBalancer := 1
	if len(nics) > 0 {
		keysPerLoadBalancer = 3
	}
	watch := newStopwatch(keysPerLoadBalancer * n)
	targets := targetsOf(nics)
	ironcoreCache, err := cache.New(stack.IronCore.Config, cache.Options{
		Scheme:            stack.IronCore.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{stack.Namespace: {}},
	})
	if err != nil {
		return BurstFloor{}, err
	}
	handlers := []struct {
		obj    client.Object
		handle func(obj any)
	}{
		{&networkingv1alpha1.LoadBalancer{}, func(obj any) {
			if lb, ok := obj.(*networkingv1alpha1.LoadBalancer); ok && len(lb.Status.IPs) > 0 {
				watch.done(floorAddressKey(lb.Name))
			}
		}},
		{&networkingv1alpha1.LoadBalancerRouting{}, func(obj any) {
			routing, ok := obj.(*networkingv1alpha1.LoadBalancerRouting)
			if !ok || len(nics) == 0 {
				return
			}
			switch reached := reached(routing.Destinations, targets); {
			case reached >= len(nics):
				watch.done(floorFirstKey(routing.Name))
				watch.done(floorCompleteKey(routing.Name))
			case reached > 0:
				watch.done(floorFirstKey(routing.Name))
			}
		}},
	}
	for _, h := range handlers {
		informer, err := ironcoreCache.GetInformer(ctx, h.obj)
		if err != nil {
			return BurstFloor{}, fmt.Errorf("watch %T: %w", h.obj, err)
		}
		if _, err := informer.AddEventHandler(onAddOrUpdate(h.handle)); err != nil {
			return BurstFloor{}, err
		}
	}
	go func() { _ = ironcoreCache.Start(ctx) }()
	if !ironcoreCache.WaitForCacheSync(ctx) {
		return BurstFloor{}, fmt.Errorf("the IronCore cache did not sync")
	}

	var floor BurstFloor
	started := time.Now()
	var labelled atomic.Int64
	cluster := stack.ClusterName
	err = parallel(n+len(nics), func(i int) error {
		if i >= n {
			err := patchBurstNetworkInterface(ctx, stack, nics[i-n].Name, &cluster, floorPodCIDR(i-n))
			if labelled.Add(1) == int64(len(nics)) {
				floor.LabelsWritten = newSeconds(time.Since(started))
			}
			return err
		}
		lb, err := floorLoadBalancer(stack, fmt.Sprintf("%s%04d", prefix, i), i)
		if err != nil {
			return err
		}
		for _, key := range []string{floorAddressKey(lb.Name), floorFirstKey(lb.Name), floorCompleteKey(lb.Name)}[:keysPerLoadBalancer] {
			watch.created(key)
		}
		if err := stack.IronCore.Client.Create(ctx, lb); err != nil {
			return fmt.Errorf("create LoadBalancer %s: %w", lb.Name, err)
		}
		return nil
	})
	if err != nil {
		return BurstFloor{}, err
	}
	err = watch.wait(ctx, 10*time.Minute, progress, func() string {
		return fmt.Sprintf("floor LoadBalancers with addresses %d/%d, routings with a first destination %d/%d, with every one %d/%d",
			watch.count("address/"), n, watch.count("first/"), n, watch.count("complete/"), n)
	})
	if err != nil {
		return BurstFloor{}, err
	}
	floor.Address = newTimings(watch.durations("address/"))
	floor.FirstDestination = newTimings(watch.durations("first/"))
	floor.RoutingComplete = newTimings(watch.durations("complete/"))
	floor.FirstTraffic = newTimings(firstTraffic(watch, "address/", "first/"))
	return floor, deleteFloor(ctx, stack, prefix, n)
}

// firstTraffic returns, for the objects done under both prefixes, the time from creation
// until the later of the two, shortest first.
func firstTraffic(watch *stopwatch, addressPrefix, destinationPrefix string) []time.Duration {
	addresses, destinations := watch.doneTimes(addressPrefix), watch.doneTimes(destinationPrefix)
	started := watch.startTimes(addressPrefix)
	var durations []time.Duration
	for name, addressed := range addresses {
		destined, ok := destinations[name]
		if !ok {
			continue
		}
		durations = append(durations, later(addressed, destined).Sub(started[name]))
	}
	slices.Sort(durations)
	return durations
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// floorLoadBalancer has the shape this CCM gives the LoadBalancer of the burst's i-th Service
// (one TCP port; every fifth Internal, as createBurst makes them: IronCore allocates Internal
// addresses from a Prefix, which takes it longer), without the owner labels and annotations:
// no CCM is to take it for its own.
func floorLoadBalancer(stack *testenv.Stack, name string, i int) (*networkingv1alpha1.LoadBalancer, error) {
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name, UID: types.UID(name)},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	if internal(i) {
		service.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
	}
	lb, err := lbspec.Desired(service, lbspec.Settings{
		Cluster:          stack.ClusterName,
		Network:          stack.Network,
		InternalPrefixes: map[corev1.IPFamily]string{corev1.IPv4Protocol: testenv.LoadBalancerPrefix},
		UseNICSelector:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("floor LoadBalancer %s: %w", name, err)
	}
	lb.ObjectMeta = metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}
	return lb, nil
}

// deleteFloor deletes the floor's LoadBalancers and waits until they are gone, after the
// simulated apinetlet's finalizer, and their routings too, after the garbage collector.
func deleteFloor(ctx context.Context, stack *testenv.Stack, prefix string, n int) error {
	err := parallel(n, func(i int) error {
		lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: fmt.Sprintf("%s%04d", prefix, i)}}
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
		if err := stack.ListIronCore(ctx, []client.ObjectList{lbs, routings}); err != nil {
			return err
		}
		left := 0
		for _, lb := range lbs.Items {
			if strings.HasPrefix(lb.Name, prefix) {
				left++
			}
		}
		for _, routing := range routings.Items {
			if strings.HasPrefix(routing.Name, prefix) {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d LoadBalancers and routings left", left)
		}
		return nil
	})
}
