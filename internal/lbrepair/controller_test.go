package lbrepair_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// loadBalancers stands in for the provider's load balancers, which the provider's own tests
// cover: a Service's IronCore LoadBalancer is the one named after it, read from the API
// server, and EnsureLoadBalancer creates it. The controller calls nothing else.
type loadBalancers struct {
	cloudprovider.LoadBalancer
	mu      sync.Mutex
	ensured int
}

func (l *loadBalancers) GetLoadBalancer(ctx context.Context, _ string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := readLoadBalancer(ctx, service)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return lbspec.Status(lb), true, nil
}

func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, _ string, service *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	l.mu.Lock()
	l.ensured++
	l.mu.Unlock()
	lb, err := readLoadBalancer(ctx, service)
	if apierrors.IsNotFound(err) {
		lb = stack.ServiceLoadBalancer(service)
		err = stack.IronCore.Client.Create(ctx, lb)
	}
	if err != nil {
		return nil, err
	}
	return lbspec.Status(lb), nil
}

func (l *loadBalancers) timesEnsured() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ensured
}

// allocatedStatus is the provider's AllocatedStatus for these LoadBalancers: their addresses
// once IronCore has allocated them.
func allocatedStatus(ctx context.Context, _ string, service *corev1.Service) (*corev1.LoadBalancerStatus, lbspec.Pending, error) {
	lb, err := readLoadBalancer(ctx, service)
	switch {
	case apierrors.IsNotFound(err):
		return nil, lbspec.NotPending, nil
	case err != nil:
		return nil, lbspec.NotPending, err
	case len(lb.Status.IPs) == 0:
		return nil, lbspec.PendingAddresses, nil
	}
	return lbspec.Status(lb), lbspec.NotPending, nil
}

func readLoadBalancer(ctx context.Context, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	lb := &networkingv1alpha1.LoadBalancer{}
	return lb, stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbspec.Name(service)}, lb)
}

// start runs the controller on real informers and the IronCore cache.
func start(t *testing.T) (*loadBalancers, *record.FakeRecorder) {
	t.Helper()
	lbs, recorder, _, _ := startOn(t, stack.TargetClientset)
	return lbs, recorder
}

// startOn is start with the controller's informers and writes on clientset; it also returns
// the informers' Service lister and the controller.
func startOn(t *testing.T, clientset kubernetes.Interface) (*loadBalancers, *record.FakeRecorder, corelisters.ServiceLister, *lbrepair.Controller) {
	t.Helper()
	lbs, recorder := &loadBalancers{}, record.NewFakeRecorder(100)
	var (
		services   corelisters.ServiceLister
		controller *lbrepair.Controller
	)
	stack.RunControllerForTest(t, clientset, func(ironcoreClient *ironcore.Client, factory informers.SharedInformerFactory) (testenv.Controller, error) {
		services = factory.Core().V1().Services().Lister()
		var err error
		controller, err = lbrepair.New(lbrepair.Config{
			IronCore: ironcoreClient, LoadBalancers: lbs, AllocatedStatus: allocatedStatus, ClusterName: stack.ClusterName,
			Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(), Client: clientset, Recorder: recorder,
		})
		return controller, err
	})
	return lbs, recorder, services, controller
}

func waitForStatus(t *testing.T, service *corev1.Service) string {
	t.Helper()
	var ip string
	testenv.Await(t, context.Background(), time.Minute, "an address in the Service's status", func(ctx context.Context) error {
		current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(current.Status.LoadBalancer.Ingress) == 0 {
			return errors.New("no address")
		}
		ip = current.Status.LoadBalancer.Ingress[0].IP
		return nil
	})
	return ip
}

// The addresses IronCore allocates to a Service's LoadBalancer go into the Service's status
// as soon as they arrive, without the service controller.
func TestAddressesReachTheServiceOnArrival(t *testing.T) {
	start(t)
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "repair-arrival", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb := stack.ServiceLoadBalancer(service)
	stack.CreateIronCoreForTest(t, lb)
	ip := waitForStatus(t, service)
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), lb); err != nil {
		t.Fatal(err)
	}
	if len(lb.Status.IPs) == 0 || lb.Status.IPs[0].String() != ip {
		t.Fatalf("the Service shows %s, the LoadBalancer has %v", ip, lb.Status.IPs)
	}
}

// The controller's Service lister is behind a write to the Service (its watch is held back)
// when the LoadBalancer's addresses arrive, as it is when the service controller has just
// written the Service. The status patch on the lister's version is refused; the controller reads
// the Service from the API server and writes the addresses on that version while the watch is
// still held: one refused write, not one per retry until the watch catches up.
func TestAServiceListerBehindAWriteCostsOneRead(t *testing.T) {
	proxy, _, err := stack.StartTargetProxy("repair-stale")
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(proxy.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, _, services, controller := startOn(t, clientset)
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "repair-stale", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, time.Minute, "the Service in the controller's lister", func(context.Context) error {
		_, err := services.Services(service.Namespace).Get(service.Name)
		return err
	})
	release := proxy.HoldWatches("services")
	t.Cleanup(release)
	service.Labels = map[string]string{"edited": "elsewhere"}
	edited, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Update(ctx, service, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if listed, err := services.Services(service.Namespace).Get(service.Name); err != nil || listed.ResourceVersion == edited.ResourceVersion {
		t.Fatalf("the lister shows the edit although the Service watch is held back (%v)", err)
	}
	proxy.Reset()
	lb := stack.ServiceLoadBalancer(service)
	stack.CreateIronCoreForTest(t, lb)
	waitForStatus(t, service)
	for _, count := range proxy.Counts() {
		if count.Verb == "patch" && count.Resource == "services/status" && count.Refused > 1 {
			t.Errorf("%d status patches refused; want at most the one on the lister's version", count.Refused)
		}
	}
	// Any later sync, the watch still held, decides on the controller's own write, not on the
	// lister's copy without addresses: it writes nothing, refused.
	listed, err := services.Services(service.Namespace).Get(service.Name)
	if err != nil {
		t.Fatal(err)
	}
	if newest := controller.Newest(listed); len(listed.Status.LoadBalancer.Ingress) > 0 || len(newest.Status.LoadBalancer.Ingress) == 0 {
		t.Errorf("a sync would decide on addresses %v (the lister's: %v); want those the controller wrote", newest.Status.LoadBalancer.Ingress, listed.Status.LoadBalancer.Ingress)
	}
}

// A LoadBalancer deleted behind the CCM's back, while its Service was provisioned, is made
// again, with a Warning on the Service.
func TestALoadBalancerDeletedOutOfBandIsMadeAgain(t *testing.T) {
	lbs, recorder := start(t)
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "repair-recreate", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Provisioned, as the service controller leaves it: with its cleanup finalizer and an
	// address.
	service.Finalizers = append(service.Finalizers, servicehelpers.LoadBalancerCleanupFinalizer)
	if service, err = stack.TargetClientset.CoreV1().Services(service.Namespace).Update(ctx, service, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(context.Background(), service.Name, metav1.GetOptions{})
		if err == nil {
			current.Finalizers = nil
			_, _ = stack.TargetClientset.CoreV1().Services(service.Namespace).Update(context.Background(), current, metav1.UpdateOptions{})
		}
	})
	lb := stack.ServiceLoadBalancer(service)
	stack.CreateIronCoreForTest(t, lb)
	waitForStatus(t, service)
	before := lbs.timesEnsured()

	if err := stack.IronCore.Client.Delete(ctx, lb); err != nil {
		t.Fatal(err)
	}
	testenv.AwaitEvent(t, recorder, time.Minute, lbrepair.ReasonRecreated)
	testenv.Await(t, ctx, time.Minute, "the LoadBalancer made again", func(ctx context.Context) error {
		again, err := readLoadBalancer(ctx, service)
		if err != nil {
			return err
		}
		if again.UID == lb.UID {
			return errors.New("still the deleted one")
		}
		return nil
	})
	if lbs.timesEnsured() == before {
		t.Fatal("EnsureLoadBalancer was not called")
	}
}

// A Service whose addresses are in its status is not read from the API server after its status
// write: with no type switch under way (its LoadBalancers of one type), the lister's copy serves.
// During a switch, it is read live before anything is released, as a lister behind the switch
// would take the new LoadBalancer for the replaced one. The label "phase" on the Service tells
// the test's Replacing whether a switch is under way.
func TestAServedServiceIsReadLiveOnlyDuringASwitch(t *testing.T) {
	proxy, _, err := stack.StartTargetProxy("repair-reads")
	if err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(proxy.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan string, 100) // the phase of each Service released
	var switches atomic.Int32          // the answers "a switch is under way"
	stack.RunControllerForTest(t, clientset, func(ironcoreClient *ironcore.Client, factory informers.SharedInformerFactory) (testenv.Controller, error) {
		return lbrepair.New(lbrepair.Config{
			IronCore: ironcoreClient, LoadBalancers: &loadBalancers{}, AllocatedStatus: allocatedStatus, ClusterName: stack.ClusterName,
			Services: factory.Core().V1().Services(), Nodes: factory.Core().V1().Nodes(), Client: clientset, Recorder: record.NewFakeRecorder(100),
			ReleaseReplaced: func(_ context.Context, _ string, service *corev1.Service) error {
				released <- service.Labels["phase"]
				return nil
			},
			Replacing: func(_ context.Context, _ string, service *corev1.Service) (bool, error) {
				if service.Labels["phase"] != "switch" {
					return false, nil
				}
				switches.Add(1)
				return true, nil
			},
		})
	})
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "repair-reads", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stack.CreateIronCoreForTest(t, stack.ServiceLoadBalancer(service))
	waitForStatus(t, service)

	// The switch: labelled, then its status cleared and written again. Every sync during it may
	// read the Service (one on the labelled copy, one after the repair's own write), but only
	// after the provider said a switch is under way; syncs of a key do not overlap, so the
	// syncs before the switch are over once a release comes.
	current, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Labels = map[string]string{"phase": "switch"}
	if current, err = stack.TargetClientset.CoreV1().Services(service.Namespace).Update(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	current.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	if _, err := stack.TargetClientset.CoreV1().Services(service.Namespace).UpdateStatus(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for phase := receive(t, released, "a release during the switch"); phase != "switch"; phase = receive(t, released, "a release during the switch") {
		t.Errorf("the repair released LoadBalancers of a Service without a type switch under way")
	}
	reads := 0
	for _, count := range proxy.Counts() {
		if count.Verb == "get" && count.Resource == "services" {
			reads += count.N
		}
	}
	// Read after the answer: reads cannot outrun the answers, however many syncs are under way.
	if answers := int(switches.Load()); reads == 0 || reads > answers {
		t.Errorf("the repair read the Service from the API server %d times, want 1 to %d: once per sync that found a switch under way", reads, answers)
	}
}

// receive returns what comes on ch within a minute.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
	}
	var zero T
	return zero
}
