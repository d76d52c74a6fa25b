package provider_test

import (
	"context"
	"errors"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// TestTheRepairDoesNotRecreateForADeletedService: the repair controller's Service lister still
// shows a Service that the API server has deleted (its watch is held back) when the Service's
// LoadBalancer is deleted out of band. The repair reads the Service from the API server before
// it creates anything, and creates nothing: a LoadBalancer made now would outlive its Service,
// since the service controller has nothing left to delete.
func TestTheRepairDoesNotRecreateForADeletedService(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := startCloudWithConfig(t, "")
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "repair-race-1")
	service := createService(t, "repair-race", testenv.ServiceOptions{})
	status := ensureUntilReady(t, lbs, service, nodes)
	service.Status.LoadBalancer = *status
	service, err := stack.TargetClientset.CoreV1().Services(service.Namespace).UpdateStatus(ctx, service, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	proxy, _, err := stack.StartTargetProxy("repair-race")
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(proxy.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(clientset, 0)
	repair, err := lbrepair.New(lbrepair.Config{
		IronCore: c.IronCore(), LoadBalancers: lbs, AllocatedStatus: c.AllocatedLoadBalancerStatus, ClusterName: "kubernetes",
		Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(), Client: clientset, Recorder: recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go repair.Run(ctx, 1)

	release := proxy.HoldWatches("services")
	t.Cleanup(release)
	if err := stack.TargetClientset.CoreV1().Services(service.Namespace).Delete(ctx, service.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := factory.Core().V1().Services().Lister().Services(service.Namespace).Get(service.Name); err != nil {
		t.Fatalf("the lister no longer shows the deleted Service although its watch is held back: %v", err)
	}
	proxy.Reset()
	lb := ironcoreLoadBalancer(t, provider.LoadBalancerName(service))
	if err := stack.IronCore.Client.Delete(ctx, lb); err != nil {
		t.Fatal(err)
	}
	err = testenv.WaitFor(ctx, waitTimeout, "the repair's read of the Service from the API server", func(context.Context) error {
		for _, count := range proxy.Counts() {
			if count.Verb == "get" && count.Resource == "services" {
				return nil
			}
		}
		return errors.New("no read yet")
	})
	if err != nil {
		t.Fatal(err)
	}
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
	c := startCloudWithConfig(t, "")
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "repair-switch-1")
	service := createService(t, "repair-switch", testenv.ServiceOptions{})
	status := ensureUntilReady(t, lbs, service, nodes)
	service.Status.LoadBalancer = *status
	service, err := stack.TargetClientset.CoreV1().Services(service.Namespace).UpdateStatus(ctx, service, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	proxy, _, err := stack.StartTargetProxy("repair-switch")
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(proxy.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(clientset, 0)
	repair, err := lbrepair.New(lbrepair.Config{
		IronCore: c.IronCore(), LoadBalancers: lbs, AllocatedStatus: c.AllocatedLoadBalancerStatus, ReleaseReplaced: c.ReleaseReplacedLoadBalancers,
		ClusterName: "kubernetes", Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(), Client: clientset, Recorder: recorder,
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go repair.Run(ctx, 1)

	release := proxy.HoldWatches("services")
	t.Cleanup(release)
	switched := service.DeepCopy()
	switched.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
	if switched, err = stack.TargetClientset.CoreV1().Services(service.Namespace).Update(ctx, switched, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy.Reset()
	// The service controller's part: the new LoadBalancer, beside the old one, until it is
	// allocated and routes somewhere.
	var successor *networkingv1alpha1.LoadBalancer
	err = testenv.WaitFor(ctx, waitTimeout, "the new Internal LoadBalancer, allocated", func(ctx context.Context) error {
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
	if err != nil {
		t.Fatal(err)
	}
	if cached, err := factory.Core().V1().Services().Lister().Services(service.Namespace).Get(service.Name); err != nil || cached.Annotations[keys.AnnotationInternalLoadBalancer] == "true" {
		t.Fatalf("the repair's cache shows the switch (%v) although its watch is held back", err)
	}
	// The allocated successor brings the Service to the repair; it either reads the Service
	// from the API server before deleting, or deletes the successor.
	err = testenv.WaitFor(ctx, waitTimeout, "the repair to look at the switching Service", func(context.Context) error {
		for _, count := range proxy.Counts() {
			if count.Verb == "get" && count.Resource == "services" {
				return nil
			}
		}
		if lb := ironcoreLoadBalancerOrNil(t, successor.Name); lb == nil || lb.DeletionTimestamp != nil {
			return nil
		}
		return errors.New("not yet")
	})
	if err != nil {
		t.Fatal(err)
	}
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
