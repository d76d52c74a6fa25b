package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// TestAnAddressOutlivesItsService runs the CCM binary with the orphan collector deleting after
// 1 s. A Public Service annotated to retain its LoadBalancer is deleted: the LoadBalancer is
// never deleted (a watch sees no deletion), its routing is emptied and holds no destination
// while retained, and the collector, which deletes a real orphan meanwhile, leaves it alone.
// A Service of another namespace asking for its address is refused, by the annotation or by
// spec.loadBalancerIP, with an event and nothing of the LoadBalancer changed. Services of other
// names in the namespace it was retained from then ask for it at once: one gets the same
// LoadBalancer and address, and its routing holds its Nodes; with the annotation the other is
// refused with an event and gets no LoadBalancer.
func TestAnAddressOutlivesItsService(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-retain", "--orphan-load-balancer-grace-period=1s")
	worker(t, "retain-1")
	worker(t, "retain-2")
	nodes := stack.NetworkInterfaceIPs(t, "retain-1", "retain-2")
	kubeSystem, err := stack.TargetClientset.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.TargetClientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blue"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for i, ask := range []struct {
		how  string
		opts func(namespace, address string) testenv.ServiceOptions
	}{
		{"annotation", func(namespace, address string) testenv.ServiceOptions {
			return testenv.ServiceOptions{Namespace: namespace, Annotations: map[string]string{keys.AnnotationLoadBalancerIPs: address}}
		}},
		{"spec", func(namespace, address string) testenv.ServiceOptions {
			return testenv.ServiceOptions{Namespace: namespace, LoadBalancerIP: address}
		}},
	} {
		t.Run(ask.how, func(t *testing.T) {
			first := createService(t, "kept-"+ask.how, testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "true"}})
			addresses := waitForIngress(t, first, anyIngress)
			name := lbspec.Name(first)
			stack.WaitForRouting(t, waitTimeout, name, nodes)
			deletions := watchLoadBalancerDeletions(t, name)
			lb := &networkingv1alpha1.LoadBalancer{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
				t.Fatal(err)
			}

			if err := deleteService(first); err != nil {
				t.Fatal(err)
			}
			waitForServiceGone(t, first)
			stack.WaitForRouting(t, waitTimeout, name, []string{})
			retained := watchDestinationsOf(t, name)
			// The collector sweeps past the grace period: a real orphan goes, the retained one stays.
			orphan := orphanLoadBalancer(t, fmt.Sprintf("retain-orphan-%d", i), stack.ClusterName, fmt.Sprintf("5a4c1d1e-0000-4000-8000-00000000010%d", i), string(kubeSystem.UID))
			waitForNoLeftovers(t, []string{orphan.Name})
			for _, ip := range nodes {
				if retained.hadEver(ip) {
					t.Errorf("the retained LoadBalancer's routing held %s", ip)
				}
			}

			version := currentVersion(t, name)
			outsider := createService(t, "outsider-"+ask.how, ask.opts("blue", addresses[0]))
			waitForServiceEvent(t, outsider.Namespace, outsider.Name, provider.ReasonNotAdopted)
			if ask.how == "spec" {
				// As for any address it cannot have: a new LoadBalancer of IronCore's choosing.
				if got := waitForIngress(t, outsider, anyIngress); slices.Equal(got, addresses) {
					t.Errorf("the Service of another namespace shows the retained addresses %v", got)
				}
			}
			if now := currentVersion(t, name); now != version {
				t.Errorf("the retained LoadBalancer changed (resource version %s, was %s) when another namespace asked for it", now, version)
			}
			if err := deleteService(outsider); err != nil {
				t.Fatal(err)
			}

			racers := []*corev1.Service{
				createService(t, "again-"+ask.how+"-a", ask.opts(metav1.NamespaceDefault, addresses[0])),
				createService(t, "again-"+ask.how+"-b", ask.opts(metav1.NamespaceDefault, addresses[0])),
			}
			winner := waitForOwner(t, name, racers)
			if got := waitForIngress(t, racers[winner], anyIngress); !slices.Equal(got, addresses) {
				t.Errorf("the new Service's addresses %v, want the retained ones %v", got, addresses)
			}
			adopted := time.Now()
			stack.WaitForRouting(t, waitTimeout, name, nodes)
			t.Logf("%s: the new Service's routing held its Nodes %s after its ingress showed the retained address", ask.how, time.Since(adopted).Round(time.Millisecond))
			loser := racers[1-winner]
			if ask.how == "annotation" {
				waitForServiceEvent(t, loser.Namespace, loser.Name, provider.ReasonNotAdopted)
				if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbspec.Name(loser)}, &networkingv1alpha1.LoadBalancer{}); client.IgnoreNotFound(err) != nil || err == nil {
					t.Errorf("the refused Service has a LoadBalancer of its own (%v)", err)
				}
			} else {
				// spec.loadBalancerIP alone was ignored on Public Services: the other gets a
				// LoadBalancer of IronCore's choosing.
				if got := waitForIngress(t, loser, anyIngress); slices.Equal(got, addresses) {
					t.Errorf("both Services show %v", got)
				}
			}
			if n := deletions.Load(); n > 0 {
				t.Errorf("the retained LoadBalancer was deleted or marked for deletion (%d events)", n)
			}
			current := &networkingv1alpha1.LoadBalancer{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, current); err != nil || current.UID != lb.UID {
				t.Errorf("LoadBalancer %s: %v, UID %s, want the same one (UID %s)", name, err, current.UID, lb.UID)
			}
			for _, racer := range racers {
				if err := deleteService(racer); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// currentVersion is the resource version of the named IronCore LoadBalancer.
func currentVersion(t *testing.T, name string) string {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
		t.Fatal(err)
	}
	return lb.ResourceVersion
}

// waitForOwner waits until the LoadBalancer records one of the Services, and returns which.
func waitForOwner(t *testing.T, name string, services []*corev1.Service) int {
	t.Helper()
	winner := -1
	testenv.Await(t, context.Background(), waitTimeout, "LoadBalancer "+name+" taken over", func(ctx context.Context) error {
		lb := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
			return err
		}
		winner = slices.IndexFunc(services, func(s *corev1.Service) bool { return string(s.UID) == lb.Labels[keys.LabelServiceUID] })
		if winner < 0 {
			return errors.New("not yet")
		}
		return nil
	})
	return winner
}

// watchLoadBalancerDeletions counts, from now on, the watch events that delete the named
// LoadBalancer or mark it for deletion.
func watchLoadBalancerDeletions(t *testing.T, name string) *atomic.Int32 {
	t.Helper()
	clientset, err := ironcoreclientset.NewForConfig(stack.IronCore.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watcher, err := clientset.NetworkingV1alpha1().LoadBalancers(stack.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var deletions atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for event := range watcher.ResultChan() {
			if lb, ok := event.Object.(*networkingv1alpha1.LoadBalancer); ok && (event.Type == watch.Deleted || lb.DeletionTimestamp != nil) {
				deletions.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		watcher.Stop()
		cancel()
		<-done
	})
	return &deletions
}
