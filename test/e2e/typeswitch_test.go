package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestAHundredServicesSwitchTypeAtOnce switches 100 Services between Public and Internal at
// once (a third of them of the CCM's load balancer class) and watches both sides: every status
// each Service goes through, and every LoadBalancer. No Service is ever without an address, the
// number of Services with one never drops, and when a replaced LoadBalancer is seen going, its
// Service already shows the new addresses: no address is left leading to a LoadBalancer being
// deleted. It logs how long the switches took.
func TestAHundredServicesSwitchTypeAtOnce(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-switch-hundred")
	worker(t, "switch-1")
	worker(t, "switch-2")

	const count = 100
	services := make([]*corev1.Service, count)
	err := parallelDo(count, func(i int) error {
		opts := testenv.ServiceOptions{}
		if i%5 == 0 {
			opts.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
		}
		if i%3 == 0 {
			opts.LoadBalancerClass = lbclass.Name
		}
		service, err := stack.CreateLoadBalancerService(ctx, fmt.Sprintf("switch-%03d", i), opts)
		services[i] = service
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, service := range services {
		t.Cleanup(func() { _ = deleteService(service) })
	}
	before := map[string][]string{}
	oldLoadBalancer := map[string]string{}
	for i, service := range services {
		before[service.Name] = waitForIngress(t, service, anyIngress)
		oldLoadBalancer[lbspec.Name(service)] = service.Name
		services[i] = stack.LiveService(t, service)
	}

	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	statuses := watchSwitchingServices(t, watchCtx, before)
	deletions := watchReplacedLoadBalancers(t, watchCtx, oldLoadBalancer, before)

	started := time.Now()
	err = parallelDo(count, func(i int) error {
		internal := services[i].Annotations[keys.AnnotationInternalLoadBalancer] == "true"
		return updateService(ctx, services[i], func(service *corev1.Service) {
			if service.Annotations == nil {
				service.Annotations = map[string]string{}
			}
			service.Annotations[keys.AnnotationInternalLoadBalancer] = fmt.Sprint(!internal)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, service := range services {
		waitForIngress(t, service, func(ips []string) error {
			if len(ips) == 0 || slices.Equal(ips, before[service.Name]) {
				return fmt.Errorf("ingress %v", ips)
			}
			return nil
		})
	}
	switched := time.Since(started)
	waitForNoLeftovers(t, slices.Collect(maps.Keys(oldLoadBalancer)))
	stop()

	minimum, emptied, took := statuses()
	early := deletions()
	t.Logf("%d Services switched type within %s (p50 %s); fewest with an address at any moment: %d; a LoadBalancer was deleted while its Service still showed its addresses: %d",
		count, switched.Round(time.Millisecond), percentile(took, 50).Round(time.Millisecond), minimum, len(early))
	if len(took) != count {
		t.Fatalf("the watch saw %d of the %d Services switch", len(took), count)
	}
	if minimum != count || len(emptied) > 0 {
		t.Errorf("fewest Services with an address: %d of %d; Services that showed none: %v", minimum, count, emptied)
	}
	if len(early) > 0 {
		t.Errorf("LoadBalancers deleted while their Service still showed their addresses: %v", early)
	}
}

// watchSwitchingServices watches the Services named in before (their addresses before the
// switch) and returns a function that reports the fewest of them with an address at any
// event, those that ever showed none, and how long each took to show new addresses.
func watchSwitchingServices(t *testing.T, ctx context.Context, before map[string][]string) func() (int, []string, []time.Duration) {
	t.Helper()
	services := stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault)
	var mu sync.Mutex
	addressed := map[string]bool{}
	for name := range before {
		addressed[name] = true
	}
	minimum, started := len(before), time.Now()
	emptied := map[string]bool{}
	switchedAfter := map[string]time.Duration{}
	done, err := testenv.ListAndWatch(ctx, services.List, services.Watch, nil, func(event watch.Event) {
		service, ok := event.Object.(*corev1.Service)
		if !ok || before[service.Name] == nil {
			return
		}
		ips := testenv.IngressIPs(service)
		mu.Lock()
		addressed[service.Name] = len(ips) > 0 && event.Type != watch.Deleted
		if !addressed[service.Name] {
			emptied[service.Name] = true
		}
		if _, seen := switchedAfter[service.Name]; !seen && len(ips) > 0 && !slices.Equal(ips, before[service.Name]) {
			switchedAfter[service.Name] = time.Since(started)
		}
		n := 0
		for _, yes := range addressed {
			if yes {
				n++
			}
		}
		minimum = min(minimum, n)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() (int, []string, []time.Duration) {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return minimum, slices.Sorted(maps.Keys(emptied)), slices.Collect(maps.Values(switchedAfter))
	}
}

// watchReplacedLoadBalancers watches IronCore's LoadBalancers and, when one named in
// serviceOf is first seen being deleted, reads its Service from the API server: the CCM
// deletes a replaced LoadBalancer only after the Service shows the new addresses, so a
// Service read after that still showing its addresses from before (the replaced
// LoadBalancer's) means the LoadBalancer went first. It returns a function that lists those.
func watchReplacedLoadBalancers(t *testing.T, ctx context.Context, serviceOf map[string]string, before map[string][]string) func() []string {
	t.Helper()
	clientset, err := ironcoreclientset.NewForConfig(stack.IronCore.Config)
	if err != nil {
		t.Fatal(err)
	}
	lbs := clientset.NetworkingV1alpha1().LoadBalancers(stack.Namespace)
	var mu sync.Mutex
	var early []string
	seen := map[string]bool{}
	done, err := testenv.ListAndWatch(ctx, lbs.List, lbs.Watch, nil, func(event watch.Event) {
		lb, ok := event.Object.(*networkingv1alpha1.LoadBalancer)
		if !ok {
			return
		}
		name := serviceOf[lb.Name]
		if name == "" || seen[lb.Name] || (lb.DeletionTimestamp == nil && event.Type != watch.Deleted) {
			return
		}
		seen[lb.Name] = true
		service, err := stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return // the test is over
		}
		if slices.Equal(testenv.IngressIPs(service), before[name]) {
			mu.Lock()
			early = append(early, lb.Name+" of "+name)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() []string {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return early
	}
}

// parallelDo runs do for 0..n-1 at once and returns their errors.
func parallelDo(n int, do func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = do(i) })
	}
	wg.Wait()
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d failed, e.g. %s", len(failed), strings.Join(failed[:min(len(failed), 3)], "; "))
	}
	return nil
}

func percentile(values []time.Duration, p int) time.Duration {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(values))
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}
