package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// leaderElectionArgs make replicas elect a leader, with short lease timings so a takeover is
// quick.
func leaderElectionArgs() []string {
	return []string{
		"--leader-elect=true",
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
	}
}

// leads reports whether the replica has logged that it acquired the leader lease.
func leads(replica *testenv.Process) bool {
	return strings.Contains(strings.ToLower(readLog(replica)), "successfully acquired lease")
}

// waitForLeader waits until exactly one of the replicas says it leads, and returns it.
func waitForLeader(t *testing.T, replicas ...*testenv.Process) *testenv.Process {
	t.Helper()
	var leader *testenv.Process
	err := testenv.WaitFor(context.Background(), waitTimeout, "a leader", func(context.Context) error {
		var leaders []*testenv.Process
		for _, replica := range replicas {
			if leads(replica) {
				leaders = append(leaders, replica)
			}
		}
		if len(leaders) != 1 {
			return fmt.Errorf("%d replicas lead", len(leaders))
		}
		leader = leaders[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return leader
}

// TestLeaderElection runs two replicas, kills the leader while Services and routed Nodes are
// being served, and checks that the other replica takes over within the lease timings and that
// nothing was done twice.
func TestLeaderElection(t *testing.T) {
	ctx := context.Background()
	args := append(leaderElectionArgs(), routeArgs()...)
	first := startCCMWithoutCrashCheck(t, "ccm-replica-1", args...)
	second := startCCMWithoutCrashCheck(t, "ccm-replica-2", args...)
	leader := waitForLeader(t, first, second)
	follower := first
	if leader == first {
		follower = second
	}

	runningMachine(t, "ha-1", testenv.MachineOptions{DualStack: true})
	createNode(t, "ha-1", testenv.NodeOptions{PodCIDRs: podCIDRs(101)})
	waitForNode(t, "ha-1", "Node ha-1 to be initialized", initialized)
	before := createService(t, "before-takeover", testenv.ServiceOptions{})
	waitForIngress(t, before, anyIngress)

	killed := time.Now()
	leader.Kill()
	err := testenv.WaitFor(ctx, waitTimeout, "the other replica to lead", func(context.Context) error {
		if !leads(follower) {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the other replica took over %s after the leader was killed (lease duration 4s)", time.Since(killed).Round(time.Millisecond))

	// The new leader serves new work...
	after := createService(t, "after-takeover", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true"}})
	waitForIngress(t, after, anyIngress)
	runningMachine(t, "ha-2", testenv.MachineOptions{DualStack: true})
	createNode(t, "ha-2", testenv.NodeOptions{PodCIDRs: podCIDRs(102)})
	waitForNode(t, "ha-2", "Node ha-2 to be initialized", initialized)
	waitForPrefixes(t, map[string][]string{"ha-1": podCIDRs(101), "ha-2": podCIDRs(102)})
	// ...and did not redo the old one.
	requireOneLoadBalancerEach(t, before, after)
}

// startCCMWithoutCrashCheck starts a replica that the test may kill.
func startCCMWithoutCrashCheck(t *testing.T, name string, args ...string) *testenv.Process {
	t.Helper()
	ccm, _, err := stack.StartCCM(ccmBinary, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ccm.Stop(); err != nil {
			t.Error(err)
		}
		checkRaces(t, name, readLog(ccm))
		checkPermissions(t, name, readLog(ccm))
		if t.Failed() {
			t.Logf("%s log tail:\n%s", name, tail(readLog(ccm), 40))
		}
	})
	return ccm
}

// waitForPrefixes waits until each Machine's NetworkInterface has exactly the pod CIDRs.
func waitForPrefixes(t *testing.T, want map[string][]string) {
	t.Helper()
	err := testenv.WaitFor(context.Background(), 2*waitTimeout, "the pod CIDRs on the NetworkInterfaces", func(ctx context.Context) error {
		for machine, cidrs := range want {
			prefixes, err := nicPrefixes(ctx, machine)
			if err != nil {
				return err
			}
			if !slices.Equal(prefixes, cidrs) {
				return fmt.Errorf("NetworkInterface of %s has prefixes %v, want %v", machine, prefixes, cidrs)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// requireOneLoadBalancerEach checks that every Service has exactly one IronCore LoadBalancer.
func requireOneLoadBalancerEach(t *testing.T, services ...*corev1.Service) {
	t.Helper()
	lbs := &networkingv1alpha1.LoadBalancerList{}
	if err := stack.IronCore.Client.List(context.Background(), lbs, client.InNamespace(stack.Namespace)); err != nil {
		t.Fatal(err)
	}
	perService := map[string]int{}
	for _, lb := range lbs.Items {
		perService[lb.Annotations[keys.AnnotationServiceUID]]++
	}
	for _, service := range services {
		if n := perService[string(service.UID)]; n != 1 {
			t.Errorf("Service %s has %d IronCore LoadBalancers", service.Name, n)
		}
	}
}

// TestRestartMidFlight kills the CCM with SIGKILL while 50 Nodes and 50 Services are
// converging, starts it again, and checks that everything converges with nothing done twice
// and, after deletion, nothing left behind.
func TestRestartMidFlight(t *testing.T) {
	const count = 50
	args := routeArgs()
	ccm := startCCMWithoutCrashCheck(t, "ccm-before-restart", args...)

	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("restart-%02d", i)
	}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := stack.CreateMachine(context.Background(), name, testenv.MachineOptions{DualStack: true}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, name := range names {
			_ = stack.IronCore.Client.Delete(context.Background(), &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: name}})
			_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	services := make([]*corev1.Service, count)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := stack.CreateNode(context.Background(), name, testenv.NodeOptions{PodCIDRs: podCIDRs(i + 1)}); err != nil {
				t.Error(err)
				return
			}
			opts := testenv.ServiceOptions{}
			if i%5 == 0 {
				opts.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
			}
			service, err := stack.CreateLoadBalancerService(context.Background(), name, opts)
			if err != nil {
				t.Error(err)
				return
			}
			services[i] = service
		}()
	}
	// Kill the CCM as soon as it has started creating LoadBalancers: in the middle of it all.
	err := testenv.WaitFor(context.Background(), waitTimeout, "the CCM to be busy", func(context.Context) error {
		if !strings.Contains(readLog(ccm), "Applied IronCore LoadBalancer") {
			return fmt.Errorf("no LoadBalancer applied yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ccm.Kill()
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, service := range services {
		t.Cleanup(func() { _ = deleteService(service) })
	}
	restarted := time.Now()
	startCCM(t, "ccm-after-restart", args...)

	want := map[string][]string{}
	for i, name := range names {
		want[name] = podCIDRs(i + 1)
		waitForNode(t, name, "Node "+name+" to be initialized", initialized)
	}
	for _, service := range services {
		waitForIngress(t, service, anyIngress)
	}
	waitForPrefixes(t, want)
	t.Logf("everything converged %s after the restart", time.Since(restarted).Round(time.Millisecond))
	requireOneLoadBalancerEach(t, services...)

	var lbNames []string
	for _, service := range services {
		lbNames = append(lbNames, provider.LoadBalancerName(service))
		if err := deleteService(service); err != nil {
			t.Fatal(err)
		}
	}
	for _, service := range services {
		waitForServiceGone(t, service)
	}
	waitForNoLeftovers(t, lbNames)
}
