package provider_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ipamv1alpha1apply "github.com/ironcore-dev/ironcore/client-go/applyconfigurations/ipam/v1alpha1"
	networkingv1alpha1apply "github.com/ironcore-dev/ironcore/client-go/applyconfigurations/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/cloud-provider/api"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// referenceLoadBalancer creates a LoadBalancer for the Service as the reference CCM does: under
// the given name, with its annotations (cluster-name being the --cluster-name it was given),
// its field manager, and a selector on the cluster label only; then waits for an address and
// for the caches of the providers seenBy to hold it.
func referenceLoadBalancer(t *testing.T, name, clusterName string, service *corev1.Service, internal bool, seenBy ...*provider.Cloud) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	ctx := context.Background()
	clientset, err := ironcoreclientset.NewForConfig(stack.IronCore.Config)
	if err != nil {
		t.Fatal(err)
	}
	spec := networkingv1alpha1apply.LoadBalancerSpec().
		WithType(networkingv1alpha1.LoadBalancerTypePublic).
		WithIPFamilies(service.Spec.IPFamilies...).
		WithNetworkRef(corev1.LocalObjectReference{Name: stack.Network}).
		WithNetworkInterfaceSelector(metav1apply.LabelSelector().WithMatchLabels(map[string]string{keys.LabelCluster: stack.ClusterName})).
		WithPorts(networkingv1alpha1apply.LoadBalancerPort().WithProtocol(corev1.ProtocolTCP).WithPort(80))
	if internal {
		// The reference omits the prefix length and leaves it to IronCore's defaulting.
		spec.WithType(networkingv1alpha1.LoadBalancerTypeInternal).WithIPs(networkingv1alpha1apply.IPSource().WithEphemeral(
			networkingv1alpha1apply.EphemeralPrefixSource().WithPrefixTemplate(ipamv1alpha1apply.PrefixTemplateSpec().WithSpec(
				ipamv1alpha1apply.PrefixSpec().WithIPFamily(corev1.IPv4Protocol).WithParentRef(corev1.LocalObjectReference{Name: testenv.LoadBalancerPrefix})))))
	}
	apply := networkingv1alpha1apply.LoadBalancer(name, stack.Namespace).
		WithAnnotations(map[string]string{
			keys.AnnotationClusterName:      clusterName,
			keys.AnnotationServiceName:      service.Name,
			keys.AnnotationServiceNamespace: service.Namespace,
			keys.AnnotationServiceUID:       string(service.UID),
		}).
		WithSpec(spec)
	if _, err := clientset.NetworkingV1alpha1().LoadBalancers(stack.Namespace).Apply(ctx, apply,
		metav1.ApplyOptions{FieldManager: "cloud-provider.ironcore.dev/loadbalancer", Force: true}); err != nil {
		t.Fatal(err)
	}
	lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}}
	stack.WaitForIronCore(t, waitTimeout, "an address for the reference LoadBalancer", lb, func() error {
		if len(lb.Status.IPs) == 0 {
			return fmt.Errorf("no address yet")
		}
		return nil
	})
	// It existed before the provider saw the Service, so it is in the provider's cache, which
	// the provider trusts for a miss.
	for _, c := range seenBy {
		waitForCachedLoadBalancer(t, c, name)
	}
	return lb
}

func legacyName(cluster string, service *corev1.Service) string {
	uidPrefix, _, _ := strings.Cut(string(service.UID), "-")
	return cluster + "-" + service.Name + "-" + uidPrefix
}

func TestReferenceLoadBalancersAreAdoptedInPlace(t *testing.T) {
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "lb-adopt-1")
	for _, tc := range []struct {
		name     string
		lbName   func(*corev1.Service) string
		cluster  string
		internal bool
	}{
		{name: "adopt-uid-name", lbName: lbspec.Name, cluster: stack.ClusterName},
		{name: "adopt-legacy-name", lbName: func(s *corev1.Service) string { return legacyName(stack.ClusterName, s) }, cluster: stack.ClusterName},
		// The reference recorded --cluster-name, whose default differs from clusterName.
		{name: "adopt-flag-cluster", lbName: func(s *corev1.Service) string { return legacyName("kubernetes", s) }, cluster: "kubernetes"},
		{name: "adopt-internal", lbName: lbspec.Name, cluster: stack.ClusterName, internal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := testenv.ServiceOptions{}
			if tc.internal {
				opts.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
			}
			service := createService(t, tc.name, opts)
			before := referenceLoadBalancer(t, tc.lbName(service), tc.cluster, service, tc.internal, c)

			status := ensureUntilReady(t, lbs, service, nodes)
			after := ironcoreLoadBalancer(t, before.Name)
			if after.UID != before.UID {
				t.Fatalf("LoadBalancer %s was recreated (UID %s, was %s)", before.Name, after.UID, before.UID)
			}
			if ips := ingressIPs(status); len(ips) != 1 || ips[0] != before.Status.IPs[0].String() {
				t.Fatalf("ingress %v, want the address it had: %v", ips, before.Status.IPs)
			}
			if after.Labels[keys.LabelServiceUID] != string(service.UID) || after.Spec.NetworkInterfaceSelector.MatchLabels[keys.LabelLoadBalancerTarget] != stack.ClusterName {
				t.Errorf("adopted LoadBalancer was not updated: labels %v, selector %v", after.Labels, after.Spec.NetworkInterfaceSelector)
			}
			owned, err := c.IronCore().LoadBalancersOfService(context.Background(), service.UID)
			if err != nil {
				t.Fatal(err)
			}
			for _, lb := range owned {
				if lb.Name != before.Name {
					t.Errorf("a second LoadBalancer %s was created", lb.Name)
				}
			}
		})
	}
}

func TestForeignLoadBalancersAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "lb-foreign-1")
	service := createService(t, "foreign", testenv.ServiceOptions{})
	// Same name and even the same Service UID, as in a restored copy of the cluster, but
	// recorded as another cluster's.
	foreign := referenceLoadBalancer(t, lbspec.Name(service), "other-cluster", service, false, c)

	stack.IronCoreProxy.Reset()
	_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
	if !errorContains(err, `of cluster "other-cluster"`) {
		t.Fatalf("EnsureLoadBalancer error %v, want an ownership conflict", err)
	}
	waitForEvent(t, service, provider.ReasonOwnershipConflict)
	if status, exists, err := lbs.GetLoadBalancer(ctx, "kubernetes", service); exists || err != nil {
		t.Errorf("GetLoadBalancer = %v, %v, %v; want not existing", status, exists, err)
	}
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Errorf("EnsureLoadBalancerDeleted: %v", err)
	}
	for verb, n := range writes() {
		if strings.Contains(verb, "loadbalancers") {
			t.Errorf("%d %s", n, verb)
		}
	}
	if after := ironcoreLoadBalancer(t, foreign.Name); after.ResourceVersion != foreign.ResourceVersion || after.DeletionTimestamp != nil {
		t.Fatalf("the foreign LoadBalancer was changed")
	}
}

func TestGetLoadBalancerOfAServiceWithoutOne(t *testing.T) {
	service := createService(t, "never-ensured", testenv.ServiceOptions{})
	status, exists, err := loadBalancerOf(t, testCloud(t)).GetLoadBalancer(context.Background(), "kubernetes", service)
	if status != nil || exists || err != nil {
		t.Fatalf("GetLoadBalancer = %v, %v, %v; want nil, false, nil", status, exists, err)
	}
}

// TestASelectorMovesOnlyOnceIronCoreCanSeeItsTargetsLabelled: adopting a reference
// LoadBalancer moves its selector to the target label. IronCore's controller applies a
// selector to its own cache of NetworkInterfaces, which can be behind the provider's: moved as
// soon as the provider's cache shows the labels, the selector made IronCore route to none of
// the NetworkInterfaces it did not see labelled yet (50 destinations to 0 for 0.9 s, taking
// over under load). The selector moves only a settling time after the labels are in place.
func TestASelectorMovesOnlyOnceIronCoreCanSeeItsTargetsLabelled(t *testing.T) {
	const settle = 3 * time.Second // selectorSettle
	ctx := context.Background()
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "lb-settle-1")
	service := createService(t, "settle", testenv.ServiceOptions{})
	before := referenceLoadBalancer(t, lbspec.Name(service), stack.ClusterName, service, false, c)
	routing := &networkingv1alpha1.LoadBalancerRouting{ObjectMeta: metav1.ObjectMeta{Namespace: before.Namespace, Name: before.Name}}
	stack.WaitForIronCore(t, waitTimeout, "IronCore to route the reference LoadBalancer", routing, func() error {
		if len(routing.Destinations) == 0 {
			return fmt.Errorf("no destination")
		}
		return nil
	})

	// unlabelled is the last time the target was read without its label, or the first call,
	// before which the settling cannot have begun (only EnsureLoadBalancer begins it); moved,
	// when the selector was read moved, after it moved. Their difference is at least how long
	// the selector waited, however slow each call.
	unlabelled, moved := time.Now(), time.Time{}
	labelled := false
	testenv.Await(t, ctx, waitTimeout, "the selector to move", func(ctx context.Context) error {
		_, ensureErr := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
		if !labelled {
			read := time.Now()
			if labelled = networkInterface(t, "lb-settle-1").Labels[keys.LabelLoadBalancerTarget] == stack.ClusterName; !labelled {
				unlabelled = read
			}
		}
		if ironcoreLoadBalancer(t, before.Name).Spec.NetworkInterfaceSelector.MatchLabels[keys.LabelLoadBalancerTarget] == stack.ClusterName {
			moved = time.Now()
			return nil
		}
		return fmt.Errorf("the selector has not moved: %w", ensureErr)
	})
	// Without the settling time the selector moves at the next call after the provider's cache
	// shows the label.
	if waited := moved.Sub(unlabelled); !labelled || waited < settle {
		t.Errorf("the selector moved %s after the target was labelled, want at least %s", waited, settle)
	}
}

// TestAMovingSelectorCostsTheServiceWorkerNoRead: whether a selector may move is checked by the
// targets controller in its own workers, and EnsureLoadBalancer answers from the latest check.
// While IronCore fails every read of a routing, EnsureLoadBalancer keeps the selector and asks
// to be retried, never failing with the read's error; once reads work, the selector moves.
func TestAMovingSelectorCostsTheServiceWorkerNoRead(t *testing.T) {
	ctx := context.Background()
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "lb-noread-1")
	service := createService(t, "noread", testenv.ServiceOptions{})
	before := referenceLoadBalancer(t, lbspec.Name(service), stack.ClusterName, service, false, c)
	stack.IronCoreProxy.FailWhere(func(r apiproxy.Request) bool {
		return r.Verb == "get" && r.Resource == "loadbalancerroutings.networking.ironcore.dev"
	})
	t.Cleanup(func() { stack.IronCoreProxy.FailWhere(nil) })
	moved := func() bool {
		return ironcoreLoadBalancer(t, before.Name).Spec.NetworkInterfaceSelector.MatchLabels[keys.LabelLoadBalancerTarget] == stack.ClusterName
	}
	for range 5 {
		_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
		if retry := (*api.RetryError)(nil); !errors.As(err, &retry) {
			t.Fatalf("EnsureLoadBalancer while routings cannot be read: %v, want a RetryError", err)
		}
		if moved() {
			t.Fatal("the selector moved while its targets' routing could not be read")
		}
	}
	stack.IronCoreProxy.FailWhere(nil)
	if err := testenv.WaitFor(ctx, waitTimeout, "the selector to move", func(ctx context.Context) error {
		_, ensureErr := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
		if !moved() {
			return fmt.Errorf("the selector has not moved: %w", ensureErr)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
