package lbtargets_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestATargetLabelGoesWithItsNodesRoute: in selector mode, a new Node that can serve before its
// route is written has its target label written with the route, in one patch of its
// NetworkInterface; a Node excluded from load balancers while its label waits is not labelled by
// its route's write; a Node with no pod CIDR to route is labelled at once.
func TestATargetLabelGoesWithItsNodesRoute(t *testing.T) {
	began := time.Now()
	controller := startWith(t, func(config *lbtargets.Config) {
		config.Selecting, config.RoutedNetwork, config.LabelRouteWait = true, stack.Network, time.Hour
	})
	ctx := context.Background()
	routes := map[string]string{"label-route-a": "10.250.1.0/24", "label-route-b": "10.250.2.0/24"}
	for name, cidr := range routes {
		nodeOnMachineWith(t, name, testenv.NodeOptions{PodCIDRs: []string{cidr}})
	}
	nodeOnMachine(t, "label-route-none", true)
	awaitLabel(t, testenv.NetworkInterfaceName("label-route-none"), true)
	if err := testenv.WaitFor(ctx, time.Minute, "both labels left to the routes", func(context.Context) error {
		for name := range routes {
			if !controller.LabelWaitsForRoute(testenv.NetworkInterfaceName(name)) {
				return fmt.Errorf("the label of %s does not wait", name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// b is excluded from load balancers: its label must not come with its route.
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "label-route-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "true"}
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, time.Minute, "the label of an excluded Node no longer waiting", func(context.Context) error {
		if controller.LabelWaitsForRoute(testenv.NetworkInterfaceName("label-route-b")) {
			return fmt.Errorf("it still waits")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The routes' writes, as CreateRoute makes them, through the controller's IronCore client.
	for name, cidr := range routes {
		prefix := netip.MustParsePrefix(cidr)
		if err := controller.IronCoreCache().UpdateNetworkInterface(ctx, testenv.NetworkInterfaceName(name), false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: prefix}})
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]bool{"label-route-a": true, "label-route-b": false} {
		nic := testenv.NetworkInterfaceName(name)
		awaitLabel(t, nic, target)
		patches := 0
		for _, write := range stack.IronCoreProxy.Writes() {
			if write.Resource == "networkinterfaces.networking.ironcore.dev" && write.Name == nic && write.At.After(began) {
				patches++
			}
		}
		if patches != 1 {
			t.Errorf("NetworkInterface %s was written %d times, want once: its route, with its label (target: %t)", nic, patches, target)
		}
	}
}

// TestATargetLabelRidesAlongOtherWrites: in selector mode, any write of the NetworkInterface of
// a Node that serves carries its target label if it lacks it; not for a Node excluded from load
// balancers, nor in a write that removes the label itself, nor for a NetworkInterface that is
// not Available.
func TestATargetLabelRidesAlongOtherWrites(t *testing.T) {
	controller := startWith(t, func(config *lbtargets.Config) { config.Selecting = true })
	ctx := context.Background()
	nodeOnMachine(t, "label-ride", true)
	name := testenv.NetworkInterfaceName("label-ride")
	awaitLabel(t, name, true)
	live := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, live); err != nil {
		t.Fatal(err)
	}
	unlabelled := live.DeepCopy()
	delete(unlabelled.Labels, keys.LabelLoadBalancerTarget)
	ride := func(base, nic *networkingv1alpha1.NetworkInterface) bool {
		nic = nic.DeepCopy()
		return controller.LabelIfServing(base, nic) && nic.Labels[keys.LabelLoadBalancerTarget] == stack.ClusterName
	}
	if !ride(unlabelled, unlabelled) {
		t.Error("the NetworkInterface of a Node that serves got no label with another write")
	}
	if ride(live, unlabelled) {
		t.Error("a write that removes the label had it put back")
	}
	unavailable := unlabelled.DeepCopy()
	unavailable.Status.State = networkingv1alpha1.NetworkInterfaceStatePending
	if ride(unavailable, unavailable) {
		t.Error("a NetworkInterface that is not Available got the label")
	}
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "label-ride", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "true"}
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, time.Minute, "an excluded Node's NetworkInterface no longer labelled along", func(context.Context) error {
		if ride(unlabelled, unlabelled) {
			return errors.New("still labelled along")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// awaitLabel waits until the NetworkInterface carries the target label, or, for target false,
// reads it once: it must not have it.
func awaitLabel(t *testing.T, name string, target bool) {
	t.Helper()
	labelled := func(ctx context.Context) (bool, error) {
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, nic); err != nil {
			return false, err
		}
		return nic.Labels[keys.LabelLoadBalancerTarget] == stack.ClusterName, nil
	}
	if !target {
		if got, err := labelled(context.Background()); err != nil || got {
			t.Fatalf("NetworkInterface %s labelled as a target: %t (%v), want not", name, got, err)
		}
		return
	}
	if err := testenv.WaitFor(context.Background(), time.Minute, "the target label of "+name, func(ctx context.Context) error {
		got, err := labelled(ctx)
		if err == nil && !got {
			err = errors.New("not labelled yet")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
