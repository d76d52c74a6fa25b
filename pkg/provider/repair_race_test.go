package provider_test

import (
	"context"
	"errors"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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
