package lbtargets_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// On a Network where a LoadBalancer does not select, IronCore misses label changes and the
// controller nudges the selecting LoadBalancers with a digest of the targets. A target label
// this process just removed, which its cache does not show yet (the watch held back), holds
// the nudge: written then, IronCore would recompute from the old label, and later syncs,
// computing the same digest, would never nudge again. Once the cache shows the removal, the
// nudge is written.
func TestTheNudgeWaitsUntilTheCacheShowsARemovedLabel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ironcoreClient, err := stack.StartIronCoreClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Not run, its informers not started: the test calls the nudge itself.
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	controller, err := lbtargets.New(lbtargets.Config{
		IronCore: ironcoreClient, Cluster: stack.ClusterName, Network: stack.Network, Selecting: true,
		Owners:   ironcore.Owners{Clusters: []string{stack.ClusterName}},
		Recorder: record.NewFakeRecorder(100),
		Nodes:    factory.Core().V1().Nodes(), Services: factory.Core().V1().Services(), EndpointSlices: factory.Discovery().V1().EndpointSlices(),
	})
	if err != nil {
		t.Fatal(err)
	}

	machine, err := stack.CreateMachine(ctx, "nudge-removed", testenv.MachineOptions{Unschedulable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(stack.IronCore.Client.Delete(context.Background(), machine)) })
	name := testenv.NetworkInterfaceName(machine.Name)
	var nic *networkingv1alpha1.NetworkInterface
	if err := testenv.WaitFor(ctx, time.Minute, "the NetworkInterface in the cache", func(ctx context.Context) error {
		cached, err := ironcoreClient.NetworkInterface(ctx, name)
		if err == nil {
			nic = cached
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := ironcoreClient.SetLabel(ctx, nic, keys.LabelLoadBalancerTarget, stack.ClusterName); err != nil {
		t.Fatal(err)
	}
	selecting := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "nudge-selecting", Labels: map[string]string{keys.LabelClusterName: stack.ClusterName}},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:                     networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies:               []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef:               corev1.LocalObjectReference{Name: stack.Network},
			NetworkInterfaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{keys.LabelLoadBalancerTarget: stack.ClusterName}},
		},
	}
	// Another's LoadBalancer on the Network, routed explicitly: IronCore now misses label changes.
	explicit := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "nudge-explicit"},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
		},
	}
	for _, lb := range []*networkingv1alpha1.LoadBalancer{selecting, explicit} {
		if err := stack.IronCore.Client.Create(ctx, lb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.IgnoreNotFound(stack.IronCore.Client.Delete(context.Background(), lb)) })
	}
	if err := testenv.WaitFor(ctx, time.Minute, "the label and both LoadBalancers in the cache", func(ctx context.Context) error {
		cached, err := ironcoreClient.NetworkInterface(ctx, name)
		if err != nil {
			return err
		}
		if cached.Labels[keys.LabelLoadBalancerTarget] != stack.ClusterName || ironcoreClient.NetworkInterfaceCacheBehind(ctx, name) {
			return errors.New("the label is not in the cache yet")
		}
		for _, lb := range []*networkingv1alpha1.LoadBalancer{selecting, explicit} {
			if _, err := ironcoreClient.LoadBalancer(ctx, lb.Name); err != nil {
				return fmt.Errorf("LoadBalancer %s is not in the cache yet: %w", lb.Name, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	release := stack.IronCoreProxy.HoldWatches("networkinterfaces.networking.ironcore.dev")
	t.Cleanup(release)
	if err := ironcoreClient.RemoveLabel(ctx, nic, keys.LabelLoadBalancerTarget); err != nil {
		t.Fatal(err)
	}
	if err := controller.NudgeSelecting(ctx, map[string]bool{}); !errors.Is(err, lbtargets.ErrCacheBehind) {
		t.Fatalf("nudge with the removal not in the cache: %v, want it to wait for the cache", err)
	}
	if digest := liveDigest(t, selecting); digest != "" {
		t.Fatalf("the selecting LoadBalancer was nudged (%s) before the cache showed the removed label", digest)
	}

	release()
	if err := testenv.WaitFor(ctx, time.Minute, "the removal in the cache", func(ctx context.Context) error {
		if ironcoreClient.NetworkInterfaceLabelBehind(ctx, keys.LabelLoadBalancerTarget) != "" {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitFor(ctx, time.Minute, "the LoadBalancers in the cache", func(ctx context.Context) error {
		return controller.NudgeSelecting(ctx, map[string]bool{})
	}); err != nil {
		t.Fatal(err)
	}
	if liveDigest(t, selecting) == "" {
		t.Error("the selecting LoadBalancer was not nudged once the cache showed the removed label")
	}
}

// liveDigest is the targets digest on the LoadBalancer as the API server has it.
func liveDigest(t *testing.T, lb *networkingv1alpha1.LoadBalancer) string {
	t.Helper()
	live := &networkingv1alpha1.LoadBalancer{}
	if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKeyFromObject(lb), live); err != nil {
		t.Fatal(err)
	}
	return live.Annotations[keys.AnnotationTargets]
}
