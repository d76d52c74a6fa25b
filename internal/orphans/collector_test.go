package orphans_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/orphans"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	stack, err = testenv.Start(context.Background(), testenv.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the test stack: %v\n", err)
		return 1
	}
	defer func() { _ = stack.Stop() }()
	return m.Run()
}

// collector starts a collector on real informers and caches, once its cache holds the named
// LoadBalancers; tests call Sweep themselves.
func collector(t *testing.T, mode config.OrphanCleanup, grace time.Duration, lbNames ...string) *orphans.Collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	client, err := stack.StartIronCoreClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	c := orphans.New(client, stack.ClusterName, factory.Core().V1().Services(), mode, grace)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	waitForCache(t, client, lbNames...)
	return c
}

// loadBalancer creates an IronCore LoadBalancer recording the given owner, as this CCM does.
func loadBalancer(t *testing.T, name string, owner ironcore.Owner) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name, Labels: map[string]string{
			keys.LabelClusterName: owner.Cluster, keys.LabelServiceNamespace: owner.Namespace,
			keys.LabelServiceName: owner.Name, keys.LabelServiceUID: owner.UID,
		}},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
		},
	}
	if err := stack.IronCore.Client.Create(context.Background(), lb); err != nil {
		t.Fatal(err)
	}
	return lb
}

func service(t *testing.T, name string, serviceType corev1.ServiceType) *corev1.Service {
	t.Helper()
	svc, err := stack.TargetClientset.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Type: serviceType, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// gone reports whether the LoadBalancer is deleted or being deleted.
func gone(t *testing.T, lb *networkingv1alpha1.LoadBalancer) bool {
	t.Helper()
	current := &networkingv1alpha1.LoadBalancer{}
	err := stack.IronCore.Client.Get(context.Background(), client.ObjectKeyFromObject(lb), current)
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return current.DeletionTimestamp != nil
}

// waitForCache waits until the collector's IronCore cache has the LoadBalancers, so a sweep
// sees them.
func waitForCache(t *testing.T, client *ironcore.Client, names ...string) {
	t.Helper()
	err := testenv.WaitFor(context.Background(), time.Minute, "the LoadBalancers in the cache", func(ctx context.Context) error {
		for _, name := range names {
			if _, err := client.LoadBalancer(ctx, name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOrphansAreDeletedAndNothingElse(t *testing.T) {
	ctx := context.Background()
	lbService := service(t, "still-wanted", corev1.ServiceTypeLoadBalancer)
	demoted := service(t, "demoted", corev1.ServiceTypeClusterIP)
	lab := stack.ClusterName
	wanted := loadBalancer(t, "wanted", ironcore.Owner{Cluster: lab, Namespace: "default", Name: lbService.Name, UID: string(lbService.UID)})
	ghost := loadBalancer(t, "ghost", ironcore.Owner{Cluster: lab, Namespace: "default", Name: "deleted-service", UID: "1f0e4b52-0000-4000-8000-000000000001"})
	replaced := loadBalancer(t, "replaced", ironcore.Owner{Cluster: lab, Namespace: "default", Name: lbService.Name, UID: "1f0e4b52-0000-4000-8000-000000000002"})
	noLongerLB := loadBalancer(t, "no-longer-lb", ironcore.Owner{Cluster: lab, Namespace: "default", Name: demoted.Name, UID: string(demoted.UID)})
	otherCluster := loadBalancer(t, "other-cluster", ironcore.Owner{Cluster: "other", Namespace: "default", Name: "deleted-service", UID: "1f0e4b52-0000-4000-8000-000000000003"})

	names := []string{"wanted", "ghost", "replaced", "no-longer-lb", "other-cluster"}
	// A long grace period: seen orphaned, but not yet old enough.
	patient := collector(t, config.OrphanCleanupDelete, time.Hour, names...)
	c := collector(t, config.OrphanCleanupDelete, 0, names...)

	deletedBefore := counter(t, "deleted")
	patient.Sweep(ctx)
	patient.Sweep(ctx)
	for _, lb := range []*networkingv1alpha1.LoadBalancer{wanted, ghost, replaced, noLongerLB, otherCluster} {
		if gone(t, lb) {
			t.Fatalf("LoadBalancer %s deleted within the grace period", lb.Name)
		}
	}
	// The first sweep only notes the orphans; the second, past the (zero) grace period, acts.
	c.Sweep(ctx)
	c.Sweep(ctx)
	for _, lb := range []*networkingv1alpha1.LoadBalancer{ghost, replaced, noLongerLB} {
		if !gone(t, lb) {
			t.Errorf("orphaned LoadBalancer %s was not deleted", lb.Name)
		}
	}
	for _, lb := range []*networkingv1alpha1.LoadBalancer{wanted, otherCluster} {
		if gone(t, lb) {
			t.Errorf("LoadBalancer %s was deleted, but it is not an orphan of this cluster", lb.Name)
		}
	}
	if deleted := counter(t, "deleted") - deletedBefore; deleted != 3 {
		t.Errorf("deletions counted: %v, want 3", deleted)
	}
}

func TestReportOnlyDeletesNothing(t *testing.T) {
	ctx := context.Background()
	ghost := loadBalancer(t, "reported-ghost", ironcore.Owner{Cluster: stack.ClusterName, Namespace: "default", Name: "gone", UID: "1f0e4b52-0000-4000-8000-000000000004"})
	c := collector(t, config.OrphanCleanupReport, 0, ghost.Name)
	reportedBefore := counter(t, "reported")
	c.Sweep(ctx)
	c.Sweep(ctx)
	if gone(t, ghost) {
		t.Fatal("report mode deleted a LoadBalancer")
	}
	if reported := counter(t, "reported") - reportedBefore; reported != 1 {
		t.Errorf("reports counted: %v, want 1", reported)
	}
}

func counter(t *testing.T, action string) float64 {
	t.Helper()
	value, err := testutil.GetCounterMetricValue(metrics.OrphanedLoadBalancers.WithLabelValues(action))
	if err != nil {
		t.Fatal(err)
	}
	return value
}
