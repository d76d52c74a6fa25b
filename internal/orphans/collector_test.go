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
	componentmetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/orphans"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// clusterID is this cluster's identity in the tests, and otherClusterID another cluster's.
const (
	clusterID      = "0c1d2e3f-0000-4000-8000-00000000c1d0"
	otherClusterID = "0c1d2e3f-0000-4000-8000-00000000c1d1"
)

// collector starts a collector of the stack's cluster in delete mode, with identity clusterID,
// on real informers and caches, once its cache holds the named LoadBalancers; tests call Sweep
// themselves.
func collector(t *testing.T, grace time.Duration, lbNames ...string) *orphans.Collector {
	t.Helper()
	s := settings(config.OrphanCleanupDelete)
	s.Grace = grace
	return collectorWith(t, s, lbNames...)
}

// settings are a collector's of the stack's cluster, with identity clusterID, in the mode; the
// tests change what they are about.
func settings(mode config.OrphanCleanup) orphans.Settings {
	id := clusterid.New()
	id.Set(clusterID)
	return orphans.Settings{Cluster: stack.ClusterName, Network: stack.Network, ClusterID: id, Mode: mode}
}

func collectorWith(t *testing.T, s orphans.Settings, lbNames ...string) *orphans.Collector {
	t.Helper()
	ctx, client := stack.StartIronCoreClientForTest(t, nil)
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	c := orphans.New(client, factory.Core().V1().Services(), s)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	waitForCache(t, client, lbNames...)
	return c
}

// loadBalancer creates an IronCore LoadBalancer recording the given owner and marked with
// this cluster's identity on the cluster's Network, as this CCM does.
func loadBalancer(t *testing.T, name string, owner ironcore.Owner) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	return loadBalancerMarked(t, name, owner, clusterID, stack.Network)
}

// loadBalancerMarked is loadBalancer with the given identity label (none if "") and Network.
func loadBalancerMarked(t *testing.T, name string, owner ironcore.Owner, mark, network string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := stack.OwnedLoadBalancer(name, owner, network)
	if mark != "" {
		lb.Labels[keys.LabelClusterID] = mark
	}
	stack.CreateIronCoreForTest(t, lb)
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

// classService creates a Service of type LoadBalancer with the load balancer class.
func classService(t *testing.T, name, class string) *corev1.Service {
	t.Helper()
	svc, err := stack.TargetClientset.CoreV1().Services("default").Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
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
	testenv.Await(t, context.Background(), time.Minute, "the LoadBalancers in the cache", func(ctx context.Context) error {
		for _, name := range names {
			if _, err := client.LoadBalancer(ctx, name); err != nil {
				return err
			}
		}
		return nil
	})
}

func TestOrphansAreDeletedAndNothingElse(t *testing.T) {
	ctx := context.Background()
	lbService := service(t, "still-wanted", corev1.ServiceTypeLoadBalancer)
	demoted := service(t, "demoted", corev1.ServiceTypeClusterIP)
	ofTheClass := classService(t, "of-the-class", lbclass.Name)
	ofAnother := classService(t, "of-another-class", "example.org/other")
	lab := stack.ClusterName
	wanted := loadBalancer(t, "wanted", ironcore.Owner{Cluster: lab, Namespace: "default", Name: lbService.Name, UID: string(lbService.UID)})
	ghost := loadBalancer(t, "ghost", ironcore.Owner{Cluster: lab, Namespace: "default", Name: "deleted-service", UID: "1f0e4b52-0000-4000-8000-000000000001"})
	replaced := loadBalancer(t, "replaced", ironcore.Owner{Cluster: lab, Namespace: "default", Name: lbService.Name, UID: "1f0e4b52-0000-4000-8000-000000000002"})
	noLongerLB := loadBalancer(t, "no-longer-lb", ironcore.Owner{Cluster: lab, Namespace: "default", Name: demoted.Name, UID: string(demoted.UID)})
	classWanted := loadBalancer(t, "class-wanted", ironcore.Owner{Cluster: lab, Namespace: "default", Name: ofTheClass.Name, UID: string(ofTheClass.UID)})
	otherClass := loadBalancer(t, "other-class", ironcore.Owner{Cluster: lab, Namespace: "default", Name: ofAnother.Name, UID: string(ofAnother.UID)})
	otherCluster := loadBalancerMarked(t, "other-cluster", ironcore.Owner{Cluster: "other", Namespace: "default", Name: "deleted-service", UID: "1f0e4b52-0000-4000-8000-000000000003"}, "", stack.Network)

	names := []string{"wanted", "ghost", "replaced", "no-longer-lb", "class-wanted", "other-class", "other-cluster"}
	// A long grace period: seen orphaned, but not yet old enough.
	patient := collector(t, time.Hour, names...)
	c := collector(t, 0, names...)

	wantDeleted := orphansCounted(t, "deleted")
	patient.Sweep(ctx)
	patient.Sweep(ctx)
	for _, lb := range []*networkingv1alpha1.LoadBalancer{wanted, ghost, replaced, noLongerLB, classWanted, otherClass, otherCluster} {
		if gone(t, lb) {
			t.Fatalf("LoadBalancer %s deleted within the grace period", lb.Name)
		}
	}
	// The first sweep only notes the orphans; the second, past the (zero) grace period, acts.
	c.Sweep(ctx)
	c.Sweep(ctx)
	for _, lb := range []*networkingv1alpha1.LoadBalancer{ghost, replaced, noLongerLB, otherClass} {
		if !gone(t, lb) {
			t.Errorf("orphaned LoadBalancer %s was not deleted", lb.Name)
		}
	}
	for _, lb := range []*networkingv1alpha1.LoadBalancer{wanted, classWanted, otherCluster} {
		if gone(t, lb) {
			t.Errorf("LoadBalancer %s was deleted, but it is not an orphan of this cluster", lb.Name)
		}
	}
	wantDeleted(4)
}

// TestSettingsThatOnlyReportDeleteNothing: report mode deletes nothing, and neither does
// delete mode with Kubernetes' default cluster name, which other clusters likely share, even
// what is marked as this cluster's; both report the orphan.
func TestSettingsThatOnlyReportDeleteNothing(t *testing.T) {
	defaultName := settings(config.OrphanCleanupDelete)
	defaultName.Cluster = config.AmbiguousClusterName
	for _, tc := range []struct {
		name, ghost, uid string
		settings         orphans.Settings
	}{
		{"report mode", "reported-ghost", "1f0e4b52-0000-4000-8000-000000000004", settings(config.OrphanCleanupReport)},
		{"the default cluster name", "default-name-ghost", "1f0e4b52-0000-4000-8000-000000000301", defaultName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ghost := loadBalancer(t, tc.ghost, ironcore.Owner{Cluster: tc.settings.Cluster, Namespace: "default", Name: "gone", UID: tc.uid})
			c := collectorWith(t, tc.settings, ghost.Name)
			wantReported := orphansCounted(t, "reported")
			c.Sweep(context.Background())
			c.Sweep(context.Background())
			if gone(t, ghost) {
				t.Fatal("a LoadBalancer was deleted")
			}
			wantReported(1)
		})
	}
}

// orphansCounted reads the count of orphaned LoadBalancers met with the action, and returns a
// check that the test's sweeps have raised it by want since.
func orphansCounted(t *testing.T, action string) func(want float64) {
	t.Helper()
	return countedFromNow(t, metrics.OrphanedLoadBalancers.WithLabelValues(action), "orphans "+action)
}

// releasesCounted is orphansCounted for the retained LoadBalancers released.
func releasesCounted(t *testing.T, action string) func(want float64) {
	t.Helper()
	return countedFromNow(t, metrics.RetainedLoadBalancersReleased.WithLabelValues(action), "releases "+action)
}

func countedFromNow(t *testing.T, counter componentmetrics.CounterMetric, what string) func(want float64) {
	t.Helper()
	before := testenv.Counter(t, counter)
	return func(want float64) {
		t.Helper()
		if got := testenv.Counter(t, counter) - before; got != want {
			t.Errorf("%s counted: %v, want %v", what, got, want)
		}
	}
}

// TestOnlyLoadBalancersMarkedAsThisClustersAreDeleted: the cluster name is shared by any
// cluster configured with it, so an orphan recording it is deleted only if it also carries
// this cluster's identity and is on this cluster's Network. The others are refused: counted,
// and left alone for good, not only until some later sweep.
func TestOnlyLoadBalancersMarkedAsThisClustersAreDeleted(t *testing.T) {
	ctx := context.Background()
	lab := stack.ClusterName
	ownerOf := func(name string, n int) ironcore.Owner {
		return ironcore.Owner{Cluster: lab, Namespace: "default", Name: name, UID: fmt.Sprintf("1f0e4b52-0000-4000-8000-0000000001%02d", n)}
	}
	ours := loadBalancerMarked(t, "mark-ours", ownerOf("mark-ours", 1), clusterID, stack.Network)
	unmarked := loadBalancerMarked(t, "mark-none", ownerOf("mark-none", 2), "", stack.Network)
	othersMark := loadBalancerMarked(t, "mark-other", ownerOf("mark-other", 3), otherClusterID, stack.Network)
	otherNetwork := loadBalancerMarked(t, "mark-ours-other-network", ownerOf("mark-ours-other-network", 4), clusterID, "another-network")
	// Marked as ours but recording another name: not what this CCM writes, so not trusted.
	renamed := loadBalancerMarked(t, "mark-ours-other-name", ironcore.Owner{Cluster: "other", Namespace: "default", Name: "x", UID: "1f0e4b52-0000-4000-8000-000000000105"}, clusterID, stack.Network)
	// Another cluster's, with its mark: not even looked at.
	foreign := loadBalancerMarked(t, "mark-foreign", ironcore.Owner{Cluster: "other", Namespace: "default", Name: "y", UID: "1f0e4b52-0000-4000-8000-000000000106"}, otherClusterID, stack.Network)

	all := []*networkingv1alpha1.LoadBalancer{ours, unmarked, othersMark, otherNetwork, renamed, foreign}
	var names []string
	for _, lb := range all {
		names = append(names, lb.Name)
	}
	c := collector(t, 0, names...)
	wantDeleted, wantRefused := orphansCounted(t, "deleted"), orphansCounted(t, "refused")
	c.Sweep(ctx)
	c.Sweep(ctx)
	c.Sweep(ctx) // past another (zero) grace period: refusals stay refusals
	if !gone(t, ours) {
		t.Errorf("LoadBalancer %s, marked as this cluster's, was not deleted", ours.Name)
	}
	for _, lb := range all[1:] {
		if gone(t, lb) {
			t.Errorf("LoadBalancer %s was deleted, but it is not marked as this cluster's on its Network", lb.Name)
		}
	}
	wantDeleted(1)
	// Four refused, each twice: once past the grace period, and again past the next one.
	wantRefused(8)
}

// TestAliasesAreThisCluster: a LoadBalancer recording an earlier name of the cluster is its
// own: deleted when marked, refused (not ignored) when not.
func TestAliasesAreThisCluster(t *testing.T) {
	ctx := context.Background()
	owner := func(name string, n int) ironcore.Owner {
		return ironcore.Owner{Cluster: "earlier-name", Namespace: "default", Name: name, UID: fmt.Sprintf("1f0e4b52-0000-4000-8000-0000000002%02d", n)}
	}
	marked := loadBalancerMarked(t, "alias-marked", owner("alias-marked", 1), clusterID, stack.Network)
	unmarked := loadBalancerMarked(t, "alias-unmarked", owner("alias-unmarked", 2), "", stack.Network)
	aliased := settings(config.OrphanCleanupDelete)
	aliased.Aliases = []string{"earlier-name"}
	c := collectorWith(t, aliased, marked.Name, unmarked.Name)
	wantRefused := orphansCounted(t, "refused")
	c.Sweep(ctx)
	c.Sweep(ctx)
	if !gone(t, marked) {
		t.Errorf("LoadBalancer %s of an alias, marked as this cluster's, was not deleted", marked.Name)
	}
	if gone(t, unmarked) {
		t.Errorf("LoadBalancer %s of an alias, not marked, was deleted", unmarked.Name)
	}
	wantRefused(1)
}

// TestNothingIsDecidedWithoutTheClusterIdentity: before the identity is read, no LoadBalancer
// can be told to be this cluster's.
func TestNothingIsDecidedWithoutTheClusterIdentity(t *testing.T) {
	ctx := context.Background()
	ghost := loadBalancer(t, "unknown-identity-ghost", ironcore.Owner{Cluster: stack.ClusterName, Namespace: "default", Name: "gone", UID: "1f0e4b52-0000-4000-8000-000000000401"})
	unknown := settings(config.OrphanCleanupDelete)
	unknown.ClusterID = clusterid.New()
	c := collectorWith(t, unknown, ghost.Name)
	c.Sweep(ctx)
	c.Sweep(ctx)
	if gone(t, ghost) {
		t.Fatal("a LoadBalancer was deleted before the cluster's identity was known")
	}
}

// retainedLoadBalancer creates a LoadBalancer of this cluster retained after a Service at the
// given time (none if zero), on the given Network.
func retainedLoadBalancer(t *testing.T, name string, at time.Time, network string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	owner := ironcore.Owner{Cluster: stack.ClusterName, Namespace: "default", Name: "deleted-" + name, UID: "1f0e4b52-0000-4000-8000-000000000009"}
	lb := stack.OwnedLoadBalancer(name, owner, network)
	lb.Labels[keys.LabelClusterID] = clusterID
	lb.Labels[keys.LabelRetained] = "true"
	lb.Annotations = map[string]string{keys.AnnotationRetainedFrom: owner.Namespace + "/" + owner.Name}
	if !at.IsZero() {
		lb.Annotations[keys.AnnotationRetainedAt] = at.UTC().Format(time.RFC3339)
	}
	stack.CreateIronCoreForTest(t, lb)
	return lb
}

// TestRetainedLoadBalancersAreNeverOrphans: a LoadBalancer retained after its Service is kept
// on purpose, so the collector never deletes it, in delete mode past the grace period, even if
// its labels still name the Service that is gone; without a retention period, however old.
func TestRetainedLoadBalancersAreNeverOrphans(t *testing.T) {
	ctx := context.Background()
	lb := retainedLoadBalancer(t, "retained", time.Now().Add(-365*24*time.Hour), stack.Network)
	c := collector(t, 0, lb.Name)
	// The first sweep notes orphans, the second acts on them.
	c.Sweep(ctx)
	c.Sweep(ctx)
	if gone(t, lb) {
		t.Fatal("the retained LoadBalancer was deleted as an orphan")
	}
	if value, err := testutil.GetGaugeMetricValue(metrics.RetainedLoadBalancers); err != nil || value != 1 {
		t.Errorf("retained LoadBalancers gauge %v (%v), want 1", value, err)
	}
}

// TestRetainedLoadBalancersAreReleasedAfterTheRetention: with a retention period, a retained
// LoadBalancer past it is deleted, with the orphan cleanup off too; one within it, one that
// records no time and one on another Network are kept; report mode only reports.
func TestRetainedLoadBalancersAreReleasedAfterTheRetention(t *testing.T) {
	ctx := context.Background()
	expired := retainedLoadBalancer(t, "retention-expired", time.Now().Add(-2*time.Hour), stack.Network)
	recent := retainedLoadBalancer(t, "retention-recent", time.Now().Add(-30*time.Minute), stack.Network)
	timeless := retainedLoadBalancer(t, "retention-timeless", time.Time{}, stack.Network)
	elsewhere := retainedLoadBalancer(t, "retention-elsewhere", time.Now().Add(-2*time.Hour), "another-network")
	names := []string{expired.Name, recent.Name, timeless.Name, elsewhere.Name}
	retaining := settings(config.OrphanCleanupReport)
	retaining.Grace, retaining.Retention = time.Minute, time.Hour

	wantReported := releasesCounted(t, "reported")
	collectorWith(t, retaining, names...).Sweep(ctx)
	if gone(t, expired) {
		t.Fatal("report mode deleted a retained LoadBalancer past its retention")
	}
	wantReported(1)

	retaining.Mode = config.OrphanCleanupOff
	wantRefused := releasesCounted(t, "refused")
	collectorWith(t, retaining, names...).Sweep(ctx)
	if !gone(t, expired) {
		t.Error("the retained LoadBalancer past its retention was not released")
	}
	for _, kept := range []*networkingv1alpha1.LoadBalancer{recent, timeless, elsewhere} {
		if gone(t, kept) {
			t.Errorf("retained LoadBalancer %s was released", kept.Name)
		}
	}
	wantRefused(1) // the one on another Network
	if value, err := testutil.GetGaugeMetricValue(metrics.RetainedLoadBalancers); err != nil || value != 4 {
		t.Errorf("retained LoadBalancers gauge %v (%v), want 4 as the sweep found them", value, err)
	}
}

// TestARetainedLoadBalancerTakenOverMeanwhileIsNotReleased: the sweep finds a retained
// LoadBalancer past its retention in a cache that lags behind a Service taking it over (its
// retained mark gone, as an adoption leaves it); the release, made on the version read, is
// refused, and the LoadBalancer stays with its addresses.
func TestARetainedLoadBalancerTakenOverMeanwhileIsNotReleased(t *testing.T) {
	ctx := context.Background()
	lb := retainedLoadBalancer(t, "retention-raced", time.Now().Add(-2*time.Hour), stack.Network)
	retaining := settings(config.OrphanCleanupDelete)
	retaining.Grace, retaining.Retention = time.Minute, time.Hour
	c := collectorWith(t, retaining, lb.Name)
	release := stack.IronCoreProxy.HoldWatches("loadbalancers.networking.ironcore.dev")
	defer release()
	adopted := lb.DeepCopy()
	patch := client.MergeFrom(lb.DeepCopy())
	delete(adopted.Labels, keys.LabelRetained)
	if err := stack.IronCore.Client.Patch(ctx, adopted, patch); err != nil {
		t.Fatal(err)
	}
	c.Sweep(ctx)
	if gone(t, lb) {
		t.Fatal("a LoadBalancer taken over since the sweep read it was released")
	}
}
