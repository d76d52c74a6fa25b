package provider_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudprovider "k8s.io/cloud-provider"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// TestARetainedLoadBalancerKeepsItsAddresses deletes a Service annotated to retain its
// LoadBalancer, in both modes: the LoadBalancer stays, the same object with the same addresses;
// it records the Service no more but still this cluster, is marked retained with where it came
// from, selects nothing, and its routing holds no destination; the Service gets an event naming
// the addresses. Called again (a retry), deleting is quiet and changes nothing.
func TestARetainedLoadBalancerKeepsItsAddresses(t *testing.T) {
	testenv.InTargetModes(t, func(t *testing.T, mode string, useSelector bool) {
		ctx := context.Background()
		var modify func(*config.Options)
		if !useSelector {
			modify = explicitTargets
		}
		c := startTestCloud(t, modify)
		c.ClusterID().Set(testClusterID)
		lbs := loadBalancerOf(t, c)
		machine := "retain-" + mode + "-1"
		service := createService(t, "retain-"+mode, testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "true"}})
		status := ensureUntilReady(t, lbs, service, workerNodes(t, machine))
		name := lbspec.Name(service)
		stack.WaitForRouting(t, waitTimeout, name, stack.NetworkInterfaceIPs(t, machine))
		before := ironcoreLoadBalancer(t, name)
		held := &networkingv1alpha1.LoadBalancerRouting{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, held); err != nil {
			t.Fatal(err)
		}

		if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
			t.Fatal(err)
		}
		stack.WaitForRouting(t, waitTimeout, name, nil)
		lb := ironcoreLoadBalancer(t, name)
		if lb.UID != before.UID || lb.DeletionTimestamp != nil {
			t.Fatalf("LoadBalancer %s (UID %s, deletion %v), want the same one (UID %s), not being deleted", name, lb.UID, lb.DeletionTimestamp, before.UID)
		}
		if got, want := ipStringsOf(lb), ingressIPs(status); !slices.Equal(got, want) {
			t.Errorf("addresses %v, want the Service's %v", got, want)
		}
		owner := ironcore.OwnerOf(lb)
		if owner.UID != "" || owner.Name != "" || owner.Namespace != "" || owner.Cluster != stack.ClusterName {
			t.Errorf("owner %+v, want this cluster (%s) and no Service", owner, stack.ClusterName)
		}
		if !ironcore.Retained(lb) || lb.Annotations[keys.AnnotationRetainedFrom] != service.Namespace+"/"+service.Name || lb.Annotations[keys.AnnotationRetainedAt] == "" {
			t.Errorf("labels %v, annotations %v: want it marked retained from %s/%s, with the time", lb.Labels, lb.Annotations, service.Namespace, service.Name)
		}
		if lb.Spec.NetworkInterfaceSelector != nil {
			t.Errorf("selector %v, want none: nothing may route to a retained LoadBalancer", lb.Spec.NetworkInterfaceSelector)
		}
		if message := waitForEvent(t, service, provider.ReasonLoadBalancerRetained); !strings.Contains(message, ingressIPs(status)[0]) {
			t.Errorf("event %q does not name the address %s", message, ingressIPs(status)[0])
		}

		// A hand edit that routes the retained LoadBalancer to its old Node again is undone.
		testenv.Await(t, ctx, waitTimeout, "a hand edit of the retained routing", func(ctx context.Context) error {
			routing := &networkingv1alpha1.LoadBalancerRouting{}
			if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: name}, routing); err != nil {
				return err
			}
			routing.Destinations = held.Destinations
			return stack.IronCore.Client.Update(ctx, routing)
		})
		stack.WaitForRouting(t, waitTimeout, name, nil)
		lb = ironcoreLoadBalancer(t, name)

		if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
			t.Fatalf("EnsureLoadBalancerDeleted again: %v", err)
		}
		if again := ironcoreLoadBalancer(t, name); again.ResourceVersion != lb.ResourceVersion {
			t.Errorf("the retained LoadBalancer was written again (resource version %s, then %s)", lb.ResourceVersion, again.ResourceVersion)
		}
		requireNoEvent(t, service, provider.ReasonOwnershipConflict)
	}, testenv.ModeSelector, testenv.ModeExplicit)
}

// TestAMisspeltRetainKeepsTheLoadBalancer: a value of the retain annotation other than "true"
// or "false" is refused with an event, and the LoadBalancer is kept as if it were "true".
func TestAMisspeltRetainKeepsTheLoadBalancer(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	service := createService(t, "retain-misspelt", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "yes"}})
	ensureUntilReady(t, lbs, service, workerNodes(t, "retain-misspelt-1"))
	name := lbspec.Name(service)
	if err := lbs.EnsureLoadBalancerDeleted(ctx, "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	if message := waitForEvent(t, service, provider.ReasonInvalidAnnotation); !strings.Contains(message, keys.AnnotationRetainLoadBalancer) {
		t.Errorf("event %q does not name the annotation", message)
	}
	if lb := ironcoreLoadBalancer(t, name); lb.DeletionTimestamp != nil || !ironcore.Retained(lb) {
		t.Errorf("LoadBalancer deletion %v, labels %v: want it kept and marked retained", lb.DeletionTimestamp, lb.Labels)
	}
}

// requireNoEvent fails if the Service has an event with the reason.
func requireNoEvent(t *testing.T, service *corev1.Service, reason string) {
	t.Helper()
	events, err := stack.TargetClientset.CoreV1().Events(service.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(service.UID) + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) > 0 {
		t.Errorf("event %s: %s", reason, events.Items[0].Message)
	}
}

// retainedLoadBalancer serves a Service annotated to retain its LoadBalancer, deletes it, and
// returns the retained LoadBalancer and the addresses the Service had.
func retainedLoadBalancer(t *testing.T, lbs cloudprovider.LoadBalancer, name string) (*networkingv1alpha1.LoadBalancer, []string) {
	t.Helper()
	service := createService(t, name, testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationRetainLoadBalancer: "true"}})
	status := ensureUntilReady(t, lbs, service, workerNodes(t, name+"-1"))
	if err := lbs.EnsureLoadBalancerDeleted(context.Background(), "kubernetes", service); err != nil {
		t.Fatal(err)
	}
	stack.WaitForRouting(t, waitTimeout, lbspec.Name(service), nil)
	return ironcoreLoadBalancer(t, lbspec.Name(service)), ingressIPs(status)
}

// TestANewServiceTakesARetainedLoadBalancerOver: a Service naming a retained LoadBalancer gets
// it, with its addresses unchanged; it records the new Service and is no longer retained, and
// its routing follows the cluster's Nodes again. A Service that was retained from and turns
// back into type LoadBalancer takes its own back without naming it.
func TestANewServiceTakesARetainedLoadBalancerOver(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	retained, addresses := retainedLoadBalancer(t, lbs, "adopted-from")

	successor := createService(t, "adopted-by", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerName: retained.Name}})
	status := ensureUntilReady(t, lbs, successor, workerNodes(t, "adopted-by-1"))
	if got := ingressIPs(status); !slices.Equal(got, addresses) {
		t.Errorf("the new Service's addresses %v, want the retained ones %v", got, addresses)
	}
	lb := ironcoreLoadBalancer(t, retained.Name)
	if lb.UID != retained.UID || ironcore.Retained(lb) || ironcore.OwnerOf(lb).UID != string(successor.UID) {
		t.Errorf("LoadBalancer UID %s (was %s), labels %v: want the same one, owned by the new Service and no longer retained", lb.UID, retained.UID, lb.Labels)
	}
	waitForEvent(t, successor, provider.ReasonLoadBalancerAdopted)
	stack.WaitForRouting(t, waitTimeout, retained.Name, stack.NetworkInterfaceIPs(t, "adopted-from-1", "adopted-by-1"))

	// The same Service, back to type LoadBalancer after a time as ClusterIP, gets its own back.
	own, ownAddresses := retainedLoadBalancer(t, lbs, "adopted-back")
	again, err := stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).Get(context.Background(), "adopted-back", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ingressIPs(ensureUntilReady(t, lbs, again, workerNodes(t, "adopted-back-2"))); !slices.Equal(got, ownAddresses) {
		t.Errorf("the Service's addresses back %v, want its retained ones %v", got, ownAddresses)
	}
	if lb := ironcoreLoadBalancer(t, own.Name); lb.UID != own.UID || ironcore.Retained(lb) {
		t.Errorf("LoadBalancer UID %s (was %s), labels %v: want its own back, no longer retained", lb.UID, own.UID, lb.Labels)
	}
}

// TestAdoptionIsRefusedWithNothingChanged: a Service naming a LoadBalancer that does not exist,
// that serves another Service, or that is of the other type gets an event saying which, and
// nothing is written on IronCore: no LoadBalancer is made in its place.
func TestAdoptionIsRefusedWithNothingChanged(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	retained, _ := retainedLoadBalancer(t, lbs, "refused-retained")
	live := createService(t, "refused-live", testenv.ServiceOptions{})
	ensureUntilReady(t, lbs, live, workerNodes(t, "refused-live-1"))
	foreign := foreignRetainedLoadBalancer(t, "refused-foreign")
	for _, tc := range []struct {
		name, target, internal, want string
	}{
		{name: "refused-missing", target: "no-such-load-balancer", want: "does not exist"},
		{name: "refused-foreign", target: foreign.Name, want: `is not retained by this cluster: cluster "another-cluster" retained it`},
		{name: "refused-serving", target: lbspec.Name(live), want: "is not retained by this cluster"},
		{name: "refused-type", target: retained.Name, internal: "true", want: "the Service asks for Internal"},
	} {
		annotations := map[string]string{keys.AnnotationLoadBalancerName: tc.target}
		if tc.internal != "" {
			annotations[keys.AnnotationInternalLoadBalancer] = tc.internal
		}
		service := createService(t, tc.name, testenv.ServiceOptions{Annotations: annotations})
		stack.IronCoreProxy.Reset()
		_, err := lbs.EnsureLoadBalancer(context.Background(), "kubernetes", service, workerNodes(t, tc.name+"-1"))
		if !errorContains(err, tc.want) {
			t.Errorf("%s: EnsureLoadBalancer error %v, want one saying %q", tc.name, err, tc.want)
		}
		if message := waitForEvent(t, service, provider.ReasonNotAdopted); !strings.Contains(message, tc.want) {
			t.Errorf("%s: event %q, want it to say %q", tc.name, message, tc.want)
		}
		// Only the refused Service's own LoadBalancer and the retained one count: the live
		// Service's LoadBalancer is nudged whenever the test's Nodes change its targets.
		for _, write := range stack.IronCoreProxy.Writes() {
			if write.Resource == "loadbalancers" && (write.Name == lbspec.Name(service) || write.Name == retained.Name) {
				t.Errorf("%s: refused adoption wrote to IronCore: %s LoadBalancer %s", tc.name, write.Verb, write.Name)
			}
		}
		requireNoLoadBalancer(t, lbspec.Name(service))
	}
	if owner := ironcore.OwnerOf(ironcoreLoadBalancer(t, lbspec.Name(live))).UID; owner != string(live.UID) {
		t.Errorf("the live Service's LoadBalancer is owned by %q, want %s", owner, live.UID)
	}
	for _, kept := range []*networkingv1alpha1.LoadBalancer{retained, foreign} {
		if lb := ironcoreLoadBalancer(t, kept.Name); lb.ResourceVersion != kept.ResourceVersion {
			t.Errorf("retained LoadBalancer %s changed (resource version %s, was %s)", kept.Name, lb.ResourceVersion, kept.ResourceVersion)
		}
	}
}

// foreignRetainedLoadBalancer creates a LoadBalancer another cluster retained, as its CCM
// marks one, on this cluster's Network.
func foreignRetainedLoadBalancer(t *testing.T, name string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb, err := stack.CreateRetainedLoadBalancer(context.Background(), name, "another-cluster", map[string]string{keys.AnnotationRetainedFrom: "default/theirs"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.IronCore.Client.Delete(context.Background(), lb) })
	// IronCore writes its address: the version to compare with is the one after that.
	stack.WaitForIronCore(t, waitTimeout, "an address for LoadBalancer "+name, lb, func() error {
		if len(lb.Status.IPs) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
	return lb
}

// TestTwoServicesRaceForOneRetainedLoadBalancer: of two Services naming one retained
// LoadBalancer at once, exactly one gets it; the other is refused with an event.
func TestTwoServicesRaceForOneRetainedLoadBalancer(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	retained, _ := retainedLoadBalancer(t, lbs, "raced")
	annotations := map[string]string{keys.AnnotationLoadBalancerName: retained.Name}
	racers := []*corev1.Service{
		createService(t, "racer-a", testenv.ServiceOptions{Annotations: annotations}),
		createService(t, "racer-b", testenv.ServiceOptions{Annotations: annotations}),
	}
	nodes := workerNodes(t, "racer-1")
	refused := make([]bool, len(racers))
	var wg sync.WaitGroup
	for i, service := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = testenv.WaitFor(context.Background(), waitTimeout, "an answer", func(ctx context.Context) error {
				_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
				var problem *lbspec.Problem
				if errors.As(err, &problem) && problem.Reason == provider.ReasonNotAdopted {
					refused[i] = true
					return nil
				}
				return err
			})
		}()
	}
	wg.Wait()
	owner := ironcore.OwnerOf(ironcoreLoadBalancer(t, retained.Name)).UID
	winners := 0
	for i, service := range racers {
		if owner == string(service.UID) {
			winners++
			if refused[i] {
				t.Errorf("%s got the LoadBalancer and was refused it", service.Name)
			}
		} else if !refused[i] {
			t.Errorf("%s neither got the LoadBalancer nor was refused", service.Name)
		}
	}
	if winners != 1 {
		t.Errorf("%d Services own the LoadBalancer, want exactly one", winners)
	}
}

// TestAServiceTakesARetainedLoadBalancerOverByItsAddress: a Public Service asking for the
// addresses of a retained LoadBalancer (annotation, or spec.loadBalancerIP) gets it with them;
// of two asking for the same addresses, exactly one does and the other is refused, with no
// LoadBalancer of its own; spec.loadBalancerIP that no retained LoadBalancer holds is ignored
// as before, with a new LoadBalancer.
func TestAServiceTakesARetainedLoadBalancerOverByItsAddress(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	for _, tc := range []struct {
		name string
		ask  func(address string) testenv.ServiceOptions
	}{
		{"annotation", func(address string) testenv.ServiceOptions {
			return testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationLoadBalancerIPs: address}}
		}},
		{"spec", func(address string) testenv.ServiceOptions { return testenv.ServiceOptions{LoadBalancerIP: address} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retained, addresses := retainedLoadBalancer(t, lbs, "by-address-"+tc.name)
			racers := []*corev1.Service{
				createService(t, "by-address-"+tc.name+"-a", tc.ask(addresses[0])),
				createService(t, "by-address-"+tc.name+"-b", tc.ask(addresses[0])),
			}
			nodes := workerNodes(t, "by-address-"+tc.name+"-2")
			var wg sync.WaitGroup
			for _, service := range racers {
				wg.Go(func() {
					_ = testenv.WaitFor(context.Background(), waitTimeout, "an answer", func(ctx context.Context) error {
						_, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
						var problem *lbspec.Problem
						if errors.As(err, &problem) && problem.Reason == provider.ReasonNotAdopted {
							return nil
						}
						return err
					})
				})
			}
			wg.Wait()
			lb := ironcoreLoadBalancer(t, retained.Name)
			if lb.UID != retained.UID || ironcore.Retained(lb) || !slices.Equal(ipStringsOf(lb), addresses) {
				t.Fatalf("LoadBalancer UID %s (was %s), labels %v, addresses %v: want the same one taken over with %v", lb.UID, retained.UID, lb.Labels, ipStringsOf(lb), addresses)
			}
			winner := slices.IndexFunc(racers, func(s *corev1.Service) bool { return string(s.UID) == ironcore.OwnerOf(lb).UID })
			if winner < 0 {
				t.Fatalf("the LoadBalancer is owned by %+v, neither Service", ironcore.OwnerOf(lb))
			}
			waitForEvent(t, racers[winner], provider.ReasonLoadBalancerAdopted)
			loser := racers[1-winner]
			if tc.name == "annotation" {
				if message := waitForEvent(t, loser, provider.ReasonNotAdopted); !strings.Contains(message, addresses[0]) {
					t.Errorf("event %q does not name the address %s", message, addresses[0])
				}
				requireNoLoadBalancer(t, lbspec.Name(loser))
			} else {
				// spec.loadBalancerIP was ignored on Public Services: the loser gets a new
				// LoadBalancer of IronCore's choosing, and an event saying so.
				ensureUntilReady(t, lbs, loser, nodes)
				waitForEvent(t, loser, provider.ReasonLoadBalancerIPIgnored)
			}
		})
	}
}
