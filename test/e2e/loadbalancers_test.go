package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// worker creates a Machine and registers its Node, and waits until the CCM initialized it.
func worker(t *testing.T, name string) {
	t.Helper()
	runningMachine(t, name, testenv.MachineOptions{})
	createNode(t, name, testenv.NodeOptions{})
	waitForNode(t, name, "Node "+name+" to be initialized", initialized)
}

func createService(t *testing.T, name string, opts testenv.ServiceOptions) *corev1.Service {
	t.Helper()
	service, err := stack.CreateLoadBalancerService(context.Background(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = deleteService(service) })
	return service
}

func deleteService(service *corev1.Service) error {
	return client.IgnoreNotFound(stack.TargetClientset.CoreV1().Services(service.Namespace).Delete(context.Background(), service.Name, metav1.DeleteOptions{}))
}

// waitForIngress waits until the Service's status has addresses accepted by check.
func waitForIngress(t *testing.T, service *corev1.Service, check func([]string) error) []string {
	t.Helper()
	var ips []string
	testenv.Await(t, context.Background(), 2*waitTimeout, "ingress of Service "+service.Name, func(ctx context.Context) error {
		current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ips = testenv.IngressIPs(current)
		return check(ips)
	})
	return ips
}

func anyIngress(ips []string) error {
	if len(ips) == 0 {
		return errors.New("no ingress yet")
	}
	return nil
}

// TestLoadBalancerLifecycle follows one Service through the CCM: an address, targets that
// follow the Nodes, a switch to Internal and back, and deletion without leftovers.
func TestLoadBalancerLifecycle(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-lb-lifecycle")
	worker(t, "lb-1")
	worker(t, "lb-2")

	service := createService(t, "lifecycle", testenv.ServiceOptions{})
	created := time.Now()
	public := waitForIngress(t, service, anyIngress)
	t.Logf("Service got address %v %s after it was created", public, time.Since(created).Round(time.Millisecond))
	name := lbspec.Name(service)
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-1", "lb-2"))

	// A new Node becomes a target; an excluded one stops being one.
	worker(t, "lb-3")
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-1", "lb-2", "lb-3"))
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "lb-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels[corev1.LabelNodeExcludeBalancers] = "true"
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, "lb-1", "lb-3"))

	// Public to Internal: a new LoadBalancer with an internal address, and the Service never
	// without an address on the way: a watch sees every status the Service goes through.
	statuses := watchIngress(t, service)
	setAnnotation(t, service, keys.AnnotationInternalLoadBalancer, "true")
	internal := waitForIngress(t, service, func(ips []string) error {
		if len(ips) != 1 || !netip.MustParsePrefix("10.1.0.0/16").Contains(netip.MustParseAddr(ips[0])) {
			return fmt.Errorf("ingress %v", ips)
		}
		return nil
	})
	t.Logf("switched to Internal: %v -> %v", public, internal)
	internalName := name + "-internal"
	stack.WaitForRouting(t, waitTimeout, internalName, stack.NetworkInterfaceIPs(t, "lb-1", "lb-3"))
	waitForNoLeftovers(t, []string{name})
	for _, ips := range statuses() {
		if len(ips) != 1 || (ips[0] != public[0] && ips[0] != internal[0]) {
			t.Errorf("during the switch the Service showed %v, want %v, then %v", ips, public, internal)
		}
	}
	// The CCM deleted the Public LoadBalancer itself: that is no deletion out of band.
	if events := serviceEvents(t, service.Namespace, service.Name, lbrepair.ReasonRecreated); len(events) > 0 {
		t.Errorf("the type switch was taken for a deletion out of band: %v", events)
	}

	if err := deleteService(service); err != nil {
		t.Fatal(err)
	}
	waitForServiceGone(t, service)
	waitForNoLeftovers(t, []string{name, internalName})
}

// watchIngress watches the Service from now on, and returns a function that returns the
// addresses of each status it went through.
func watchIngress(t *testing.T, service *corev1.Service) func() [][]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watcher, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + service.Name,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen [][]string
	go func() {
		for event := range watcher.ResultChan() {
			current, ok := event.Object.(*corev1.Service)
			if !ok {
				continue
			}
			mu.Lock()
			seen = append(seen, testenv.IngressIPs(current))
			mu.Unlock()
		}
	}()
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func setAnnotation(t *testing.T, service *corev1.Service, key, value string) {
	t.Helper()
	err := updateService(context.Background(), service, func(current *corev1.Service) {
		if current.Annotations == nil {
			current.Annotations = map[string]string{}
		}
		current.Annotations[key] = value
	})
	if err != nil {
		t.Fatal(err)
	}
}

// updateService changes the Service as the API server has it, again on a conflict: the CCM
// writes the Service's status and finalizer whenever it gets to them.
func updateService(ctx context.Context, service *corev1.Service, change func(*corev1.Service)) error {
	services := stack.TargetClientset.CoreV1().Services(service.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := services.Get(ctx, service.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(current)
		_, err = services.Update(ctx, current, metav1.UpdateOptions{})
		return err
	})
}

func waitForServiceGone(t *testing.T, service *corev1.Service) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "Service "+service.Name+" to be gone", func(ctx context.Context) error {
		_, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.Join(err, errors.New("still there"))
	})
}

// waitForNoLeftovers waits until no IronCore LoadBalancer, LoadBalancerRouting or ephemeral
// Prefix of the named LoadBalancers is left.
func waitForNoLeftovers(t *testing.T, lbNames []string) {
	t.Helper()
	wanted := map[string]bool{}
	for _, name := range lbNames {
		wanted[name] = true
	}
	testenv.Await(t, context.Background(), 2*waitTimeout, "no IronCore leftovers", func(ctx context.Context) error {
		var left []string
		lbs := &networkingv1alpha1.LoadBalancerList{}
		routings := &networkingv1alpha1.LoadBalancerRoutingList{}
		prefixes := &ipamv1alpha1.PrefixList{}
		if err := stack.ListIronCore(ctx, []client.ObjectList{lbs, routings, prefixes}); err != nil {
			return err
		}
		for _, lb := range lbs.Items {
			if wanted[lb.Name] {
				left = append(left, "LoadBalancer "+lb.Name)
			}
		}
		for _, routing := range routings.Items {
			if wanted[routing.Name] {
				left = append(left, "LoadBalancerRouting "+routing.Name)
			}
		}
		for _, prefix := range prefixes.Items {
			for name := range wanted {
				if prefix.Name == networkingv1alpha1.LoadBalancerIPIPAMPrefixName(name, 0) || prefix.Name == networkingv1alpha1.LoadBalancerIPIPAMPrefixName(name, 1) {
					left = append(left, "Prefix "+prefix.Name)
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%d left, e.g. %v", len(left), left[:min(len(left), 3)])
		}
		return nil
	})
}

// TestFiftyServicesAtOnce creates 50 Services in a burst, 10 of them Internal, and waits for
// every one to get an address; then deletes them all and waits until nothing is left on IronCore.
func TestFiftyServicesAtOnce(t *testing.T) {
	startCCM(t, "ccm-fifty")
	worker(t, "burst-1")
	worker(t, "burst-2")

	const count = 50
	services := make([]*corev1.Service, count)
	started := time.Now()
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := testenv.ServiceOptions{}
			if i%5 == 0 {
				opts.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
			}
			service, err := stack.CreateLoadBalancerService(context.Background(), fmt.Sprintf("burst-%02d", i), opts)
			if err != nil {
				t.Error(err)
				return
			}
			services[i] = service
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var names []string
	for _, service := range services {
		t.Cleanup(func() { _ = deleteService(service) })
		names = append(names, lbspec.Name(service))
	}
	for _, service := range services {
		waitForIngress(t, service, anyIngress)
	}
	t.Logf("all %d Services had an address %s after the burst began", count, time.Since(started).Round(time.Millisecond))

	deleted := time.Now()
	for _, service := range services {
		if err := deleteService(service); err != nil {
			t.Fatal(err)
		}
	}
	for _, service := range services {
		waitForServiceGone(t, service)
	}
	waitForNoLeftovers(t, names)
	t.Logf("all %d Services and their IronCore objects were gone %s after the deletions began", count, time.Since(deleted).Round(time.Millisecond))
}

// TestServiceWhoseLoadBalancerVanishedCanBeDeleted removes the IronCore LoadBalancer behind the
// CCM's back; deleting the Service must still complete. The repair controller, which would
// recreate the LoadBalancer, is off, so that the Service is deleted while it has none.
func TestServiceWhoseLoadBalancerVanishedCanBeDeleted(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-vanished", "--controllers=*,-"+lbrepair.Name)
	worker(t, "vanished-1")
	service := createService(t, "vanished", testenv.ServiceOptions{})
	waitForIngress(t, service, anyIngress)
	lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(service)}}
	if err := stack.IronCore.Client.Delete(ctx, lb); err != nil {
		t.Fatal(err)
	}
	waitForNoLeftovers(t, []string{lb.Name})
	if err := deleteService(service); err != nil {
		t.Fatal(err)
	}
	waitForServiceGone(t, service)
}

// TestOrphanedLoadBalancersAreCollected gives the CCM a LoadBalancer of this cluster whose
// Service is gone, as after a CCM outage, and LoadBalancers of other clusters: one of another
// name, and two recording this cluster's name, as another cluster configured with the same
// name would make them, one without this cluster's identity label and one with another
// cluster's. Only this cluster's is deleted; the two namesakes are refused.
func TestOrphanedLoadBalancersAreCollected(t *testing.T) {
	ctx := context.Background()
	kubeSystem, err := stack.TargetClientset.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orphan := orphanLoadBalancer(t, "orphan", stack.ClusterName, "5a4c1d1e-0000-4000-8000-000000000001", string(kubeSystem.UID))
	foreign := orphanLoadBalancer(t, "foreign-orphan", "another-cluster", "5a4c1d1e-0000-4000-8000-000000000002", "")
	namesakes := []*networkingv1alpha1.LoadBalancer{
		orphanLoadBalancer(t, "namesake-unmarked", stack.ClusterName, "5a4c1d1e-0000-4000-8000-000000000003", ""),
		orphanLoadBalancer(t, "namesake-marked", stack.ClusterName, "5a4c1d1e-0000-4000-8000-000000000004", "5a4c1d1e-0000-4000-8000-0000000000ff"),
	}
	ccm := startCCM(t, "ccm-orphans", "--orphan-load-balancer-grace-period=2s")
	waitForNoLeftovers(t, []string{orphan.Name})
	// Wait until the collector decided on each namesake: it logged a refusal, or deleted it.
	testenv.Await(t, ctx, waitTimeout, "the collector's decision on the namesakes", func(ctx context.Context) error {
		for _, lb := range namesakes {
			current := &networkingv1alpha1.LoadBalancer{}
			err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), current)
			deleted := apierrors.IsNotFound(err) || (err == nil && current.DeletionTimestamp != nil)
			if !deleted && !refusalLogged(readLog(ccm), lb) {
				return fmt.Errorf("no decision on %s yet", lb.Name)
			}
		}
		return nil
	})
	for _, lb := range append(namesakes, foreign) {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), lb); err != nil || lb.DeletionTimestamp != nil {
			t.Errorf("another cluster's LoadBalancer %s was deleted: %v, %v", lb.Name, err, lb.DeletionTimestamp)
		}
	}
}

// refusalLogged reports whether the CCM's log says it did not delete lb.
func refusalLogged(log string, lb *networkingv1alpha1.LoadBalancer) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "Not deleting IronCore LoadBalancer") && strings.Contains(line, `loadBalancer="`+lb.Namespace+"/"+lb.Name+`"`) {
			return true
		}
	}
	return false
}

// orphanLoadBalancer creates a LoadBalancer of a Service that no longer exists, recording the
// cluster as the reference CCM does, and with the identity label mark unless it is empty.
func orphanLoadBalancer(t *testing.T, name, cluster, serviceUID, mark string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name, Annotations: map[string]string{
			keys.AnnotationClusterName: cluster, keys.AnnotationServiceNamespace: "default",
			keys.AnnotationServiceName: "deleted-while-the-ccm-was-down", keys.AnnotationServiceUID: serviceUID,
		}},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
		},
	}
	if mark != "" {
		lb.Labels = map[string]string{keys.LabelClusterID: mark}
	}
	if err := stack.IronCore.Client.Create(context.Background(), lb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), lb) })
	return lb
}
