package provider_test

import (
	"context"
	"errors"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// repairRace is a served Service and a repair controller that reaches the cluster through a
// proxy of its own, whose watches a test can hold back.
type repairRace struct {
	cloud    *provider.Cloud
	lbs      cloudprovider.LoadBalancer
	nodes    []*corev1.Node
	service  *corev1.Service
	proxy    *apiproxy.Proxy
	services corelisters.ServiceLister
}

// startRepairRace serves a Service named name on a cloud of its own, with its addresses in its
// status, and starts the repair controller behind a proxy; with release, it releases the
// LoadBalancers a type switch replaced.
func startRepairRace(ctx context.Context, t *testing.T, name string, release bool) *repairRace {
	t.Helper()
	r := &repairRace{cloud: startCloudWithConfig(t, "")}
	r.lbs = loadBalancerOf(t, r.cloud)
	r.nodes = workerNodes(t, name+"-1")
	service := createService(t, name, testenv.ServiceOptions{})
	service.Status.LoadBalancer = *ensureUntilReady(t, r.lbs, service, r.nodes)
	var err error
	if r.service, err = stack.TargetClientset.CoreV1().Services(service.Namespace).UpdateStatus(ctx, service, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r.proxy, _, err = stack.StartTargetProxy(name); err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(r.proxy.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(clientset, 0)
	config := lbrepair.Config{
		IronCore: r.cloud.IronCore(), LoadBalancers: r.lbs, AllocatedStatus: r.cloud.AllocatedLoadBalancerStatus,
		ClusterName: "kubernetes", Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(), Client: clientset, Recorder: recorder,
	}
	if release {
		config.ReleaseReplaced, config.Replacing = r.cloud.ReleaseReplacedLoadBalancers, r.cloud.ReplacingLoadBalancers
	}
	repair, err := lbrepair.New(config)
	if err != nil {
		t.Fatal(err)
	}
	r.services = factory.Core().V1().Services().Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go repair.Run(ctx, 1)
	return r
}

// readServices tells whether the repair has read a Service from the API server.
func (r *repairRace) readServices() bool {
	for _, count := range r.proxy.Counts() {
		if count.Verb == "get" && count.Resource == "services" {
			return true
		}
	}
	return false
}

// TestTheRepairDoesNotRecreateForADeletedService: the repair controller's Service lister still
// shows a Service that the API server has deleted (its watch is held back) when the Service's
// LoadBalancer is deleted out of band. The repair reads the Service from the API server before
// it creates anything, and creates nothing: a LoadBalancer made now would outlive its Service,
// since the service controller has nothing left to delete.
func TestTheRepairDoesNotRecreateForADeletedService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := startRepairRace(ctx, t, "repair-race", false)
	service, proxy := r.service, r.proxy

	release := proxy.HoldWatches("services")
	t.Cleanup(release)
	if err := stack.TargetClientset.CoreV1().Services(service.Namespace).Delete(ctx, service.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.services.Services(service.Namespace).Get(service.Name); err != nil {
		t.Fatalf("the lister no longer shows the deleted Service although its watch is held back: %v", err)
	}
	proxy.Reset()
	lb := ironcoreLoadBalancer(t, lbspec.Name(service))
	if err := stack.IronCore.Client.Delete(ctx, lb); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, waitTimeout, "the repair's read of the Service from the API server", func(context.Context) error {
		if r.readServices() {
			return nil
		}
		return errors.New("no read yet")
	})
	release()
	left := &networkingv1alpha1.LoadBalancerList{}
	if err := stack.IronCore.Client.List(ctx, left, client.InNamespace(stack.Namespace), client.MatchingLabels{keys.LabelServiceUID: string(service.UID)}); err != nil {
		t.Fatal(err)
	}
	for _, lb := range left.Items {
		if lb.DeletionTimestamp == nil {
			t.Errorf("the repair created LoadBalancer %s for a Service that is gone", lb.Name)
		}
	}
}

// TestTheRepairDoesNotReleaseASwitchsSuccessorOnAStaleService: a Service switches from Public to
// Internal while the repair controller's Service cache still shows it Public (its watch is
// held back). The switch's new Internal LoadBalancer, once allocated, brings the Service to the
// repair, which to that cache looks replaced. The repair decides what to delete on the Service
// as the API server has it, and deletes nothing: deleting the new LoadBalancer would leave the
// Service on the old one for good, as nothing would create the new one again.
func TestTheRepairDoesNotReleaseASwitchsSuccessorOnAStaleService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := startRepairRace(ctx, t, "repair-switch", true)
	service, proxy, lbs, nodes := r.service, r.proxy, r.lbs, r.nodes

	if replacing, err := r.cloud.ReplacingLoadBalancers(ctx, "kubernetes", service); err != nil || replacing {
		t.Fatalf("a Service with one LoadBalancer is taken for one in a type switch (%t, %v)", replacing, err)
	}
	release := proxy.HoldWatches("services")
	t.Cleanup(release)
	switched := service.DeepCopy()
	switched.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
	switched, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Update(ctx, switched, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Reset()
	// The service controller's part: the new LoadBalancer, beside the old one, until it is
	// allocated and routes somewhere.
	var successor *networkingv1alpha1.LoadBalancer
	testenv.Await(t, ctx, waitTimeout, "the new Internal LoadBalancer, allocated", func(ctx context.Context) error {
		if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", switched, nodes); err != nil {
			var retry *api.RetryError
			if !errors.As(err, &retry) {
				return err
			}
		}
		list := &networkingv1alpha1.LoadBalancerList{}
		if err := stack.IronCore.Client.List(ctx, list, client.InNamespace(stack.Namespace), client.MatchingLabels{keys.LabelServiceUID: string(service.UID)}); err != nil {
			return err
		}
		for i := range list.Items {
			if lb := &list.Items[i]; lb.Spec.Type == networkingv1alpha1.LoadBalancerTypeInternal && len(lb.Status.IPs) > 0 {
				successor = lb
				return nil
			}
		}
		return errors.New("none yet")
	})
	if cached, err := r.services.Services(service.Namespace).Get(service.Name); err != nil || cached.Annotations[keys.AnnotationInternalLoadBalancer] == "true" {
		t.Fatalf("the repair's cache shows the switch (%v) although its watch is held back", err)
	}
	// Both ways the Service may look, before the switch and after, have a switch under way.
	for _, view := range []*corev1.Service{service, switched} {
		testenv.Await(t, ctx, waitTimeout, "the switch under way in the IronCore cache", func(ctx context.Context) error {
			replacing, err := r.cloud.ReplacingLoadBalancers(ctx, "kubernetes", view)
			if err == nil && !replacing {
				err = errors.New("no switch under way")
			}
			return err
		})
	}
	// The allocated successor brings the Service to the repair; it either reads the Service
	// from the API server before deleting, or deletes the successor.
	testenv.Await(t, ctx, waitTimeout, "the repair to look at the switching Service", func(context.Context) error {
		if r.readServices() {
			return nil
		}
		if lb := ironcoreLoadBalancerOrNil(t, successor.Name); lb == nil || lb.DeletionTimestamp != nil {
			return nil
		}
		return errors.New("not yet")
	})
	if lb := ironcoreLoadBalancerOrNil(t, successor.Name); lb == nil || lb.UID != successor.UID || lb.DeletionTimestamp != nil {
		t.Fatalf("the repair deleted the switch's new LoadBalancer %s on a Service cache behind the switch", successor.Name)
	}
	release()
}

// ironcoreLoadBalancerOrNil reads the IronCore LoadBalancer, nil if it is gone.
func ironcoreLoadBalancerOrNil(t *testing.T, name string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return lb
}
