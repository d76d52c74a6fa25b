package provider_test

import (
	"context"
	"strings"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestLoadBalancersAreMarkedWithTheClusterIdentity: once the cluster's identity is known, the
// LoadBalancers the provider applies carry it; one applied before gets it on the next sync.
func TestLoadBalancersAreMarkedWithTheClusterIdentity(t *testing.T) {
	const identity = "5e1f0000-0000-4000-8000-00000000c1d0"
	c := startCloudWithConfig(t, "")
	lbs := loadBalancerOf(t, c)
	service := createService(t, "mark-later", testenv.ServiceOptions{})
	nodes := workerNodes(t, "mark-later-1")

	ensureUntilReady(t, lbs, service, nodes)
	before := ironcoreLoadBalancer(t, lbspec.Name(service))
	if mark, ok := before.Labels[keys.LabelClusterID]; ok {
		t.Fatalf("marked with %q before the identity was known", mark)
	}

	c.ClusterID().Set(identity)
	ensureUntilReady(t, lbs, service, nodes)
	after := ironcoreLoadBalancer(t, before.Name)
	if after.UID != before.UID || after.Labels[keys.LabelClusterID] != identity {
		t.Fatalf("after the identity is known: UID %s (was %s), label %s=%q; want the same LoadBalancer marked %q",
			after.UID, before.UID, keys.LabelClusterID, after.Labels[keys.LabelClusterID], identity)
	}
}

// TestLoadBalancersMarkedByAnotherClusterAreLeftAlone: a LoadBalancer that records this
// cluster's name and even the Service's UID, but carries another cluster's identity, is managed
// by that cluster's CCM; taking it over would have the two CCMs fight over it.
func TestLoadBalancersMarkedByAnotherClusterAreLeftAlone(t *testing.T) {
	const other = "5e1f0000-0000-4000-8000-00000000c1d1"
	ctx := context.Background()
	c := startCloudWithConfig(t, "")
	c.ClusterID().Set("5e1f0000-0000-4000-8000-00000000c1d2")
	service := createService(t, "marked-elsewhere", testenv.ServiceOptions{})
	nodes := workerNodes(t, "marked-elsewhere-1")
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(service), Labels: map[string]string{
			keys.LabelClusterName: stack.ClusterName, keys.LabelServiceNamespace: service.Namespace,
			keys.LabelServiceName: service.Name, keys.LabelServiceUID: string(service.UID), keys.LabelClusterID: other,
		}},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: service.Spec.IPFamilies,
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
		},
	}
	if err := stack.IronCore.Client.Create(ctx, lb); err != nil {
		t.Fatal(err)
	}
	// Left behind, a LoadBalancer without a NetworkInterface selector keeps IronCore v0.5.0's
	// controller-manager from re-routing the LoadBalancers it lists after it when a
	// NetworkInterface changes (its event handler returns instead of going on to the next).
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), lb) })
	// A LoadBalancer that exists before the Service is synced is in the cache by then; the
	// provider trusts the cache's miss (a new Service costs no read), not its lag.
	waitForCachedLoadBalancer(t, c, lb.Name)
	stack.IronCoreProxy.Reset()
	lbs := loadBalancerOf(t, c)
	_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
	if !errorContains(err, "the CCM of the cluster with identity "+other) {
		t.Fatalf("EnsureLoadBalancer error %v, want an ownership conflict naming the other identity", err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v", err)
	}
	for verb, n := range writes() {
		if strings.Contains(verb, "loadbalancers") {
			t.Errorf("%d %s", n, verb)
		}
	}
	if after := ironcoreLoadBalancer(t, lb.Name); after.Labels[keys.LabelClusterID] != other || after.DeletionTimestamp != nil {
		t.Fatalf("another cluster's LoadBalancer was changed: labels %v, deletion %v", after.Labels, after.DeletionTimestamp)
	}
}
