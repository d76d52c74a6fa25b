package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
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
	testenv.Await(t, context.Background(), waitTimeout, "a leader", func(context.Context) error {
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
	return leader
}

// TestLeaderElection runs two replicas, kills the leader while Services and routed Nodes are
// being served, and checks that the other replica takes over within the lease timings and that
// nothing was done twice.
func TestLeaderElection(t *testing.T) {
	ctx := context.Background()
	leader, follower := startReplicas(t, "ccm-replica")

	runningMachine(t, "ha-1", testenv.MachineOptions{DualStack: true})
	createNode(t, "ha-1", testenv.NodeOptions{PodCIDRs: podCIDRs(101)})
	waitForNode(t, "ha-1", "Node ha-1 to be initialized", initialized)
	before := createService(t, "before-takeover", testenv.ServiceOptions{})
	waitForIngress(t, before, anyIngress)

	killed := time.Now()
	leader.Kill()
	testenv.Await(t, ctx, waitTimeout, "the other replica to lead", func(context.Context) error {
		if !leads(follower) {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
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
	testenv.Await(t, context.Background(), 2*waitTimeout, "the pod CIDRs on the NetworkInterfaces", func(ctx context.Context) error {
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

	names := numbered("restart", count)
	createMachines(t, names, testenv.MachineOptions{DualStack: true})
	var wg sync.WaitGroup
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
	testenv.Await(t, context.Background(), waitTimeout, "the CCM to be busy", func(context.Context) error {
		if !strings.Contains(readLog(ccm), "Applied IronCore LoadBalancer") {
			return fmt.Errorf("no LoadBalancer applied yet")
		}
		return nil
	})
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
		lbNames = append(lbNames, lbspec.Name(service))
		if err := deleteService(service); err != nil {
			t.Fatal(err)
		}
	}
	for _, service := range services {
		waitForServiceGone(t, service)
	}
	waitForNoLeftovers(t, lbNames)
}

// TestAPausedLeaderWritesNothingOnceAnotherLeads pauses the leading replica (SIGSTOP) in the
// middle of a write, to IronCore or to the cluster, past its lease, until the other replica has
// taken over and written itself, then lets it go on (SIGCONT). Each replica reaches IronCore and
// the cluster through proxies of its own, whose logs of writes show which replica wrote what
// when: the paused one must write nothing of any kind after the other acquired the lease, and
// must exit. Three rounds, leadership moving each time.
func TestAPausedLeaderWritesNothingOnceAnotherLeads(t *testing.T) {
	const rounds = 3
	type replica struct {
		name                         string
		proxy, targetProxy           *apiproxy.Proxy
		kubeconfig, targetKubeconfig string
		process                      *testenv.Process
		starts                       int
	}
	start := func(r *replica) {
		r.starts++
		r.process = startCCMWithoutCrashCheck(t, fmt.Sprintf("%s-%d", r.name, r.starts),
			append(leaderElectionArgs(), "--ironcore-kubeconfig="+r.kubeconfig, "--kubeconfig="+r.targetKubeconfig)...)
	}
	replicas := []*replica{{name: "ccm-paused-a"}, {name: "ccm-paused-b"}}
	for _, r := range replicas {
		var err error
		if r.proxy, r.kubeconfig, err = stack.StartIronCoreProxy(r.name); err != nil {
			t.Fatal(err)
		}
		if r.targetProxy, r.targetKubeconfig, err = stack.StartTargetProxy(r.name); err != nil {
			t.Fatal(err)
		}
		start(r)
	}
	worker(t, "paused-worker")

	// A steady stream of new Services keeps the leader writing to IronCore.
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex
		services []*corev1.Service
		created  sync.WaitGroup
	)
	created.Add(1)
	go func() {
		defer created.Done()
		ticker := time.NewTicker(250 * time.Millisecond)
		defer ticker.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			service, err := stack.CreateLoadBalancerService(context.Background(), fmt.Sprintf("paused-%03d", i), testenv.ServiceOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			services = append(services, service)
			mu.Unlock()
		}
	}()
	stopCreating := func() []*corev1.Service {
		cancel()
		created.Wait()
		return services
	}
	// Replicas started later stop before cleanups registered now run: the Services are
	// deleted at the end, while a replica leads, and only if the test gets there.
	t.Cleanup(func() {
		for _, service := range stopCreating() {
			_ = deleteService(service)
		}
	})

	for round := 1; round <= rounds; round++ {
		leaderProcess := waitForLeader(t, replicas[0].process, replicas[1].process)
		leader, other := replicas[0], replicas[1]
		if leaderProcess == other.process {
			leader, other = other, leader
		}
		holder := leaseHolder(t)
		// Pause the leader as one of its writes arrives, other than of its lease: in the middle
		// of its work.
		pausedAt, err := leader.process.PauseAtWrite(waitTimeout, func(write apiproxy.Write) bool {
			return write.Resource != "leases.coordination.k8s.io"
		}, leader.proxy, leader.targetProxy)
		if err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		acquired := waitForNewLeaseHolder(t, holder)
		waitForWrites(t, other.proxy, acquired, other.name+" to write to IronCore as the new leader")
		if err := leader.process.Resume(); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		select {
		case <-leader.process.Exited():
		case <-time.After(waitTimeout):
			t.Fatalf("round %d: %s went on running after it lost its lease", round, leader.process.Name)
		}
		var late []apiproxy.Write
		for _, write := range append(leader.proxy.Writes(), leader.targetProxy.Writes()...) {
			// A renewal from the lease it knew, which the API server refuses as a conflict
			// (its resourceVersion check is the fence on the lease itself), is not a write.
			refused := write.Resource == "leases.coordination.k8s.io" && write.Status == http.StatusConflict
			// Nor is a request the fence cut off mid-request, as the process resumed from
			// between its check and the send: the API server did not receive it whole.
			if write.At.After(acquired) && write.Cut {
				t.Logf("round %d: %s's %s %s %s was cut off mid-request by the fence", round, leader.name, write.Verb, write.Resource, write.Name)
			}
			if write.At.After(acquired) && !refused && !write.Cut {
				late = append(late, write)
			}
		}
		t.Logf("round %d: %s paused at %s %s %s for %s; %s acquired the lease %s after the pause; the paused one exited %s after it resumed, with %d writes after the takeover",
			round, leader.name, pausedAt.Verb, pausedAt.Resource, pausedAt.Name, resumed.Sub(paused).Round(time.Millisecond), other.name, acquired.Sub(paused).Round(time.Millisecond),
			time.Since(resumed).Round(time.Millisecond), len(late))
		for _, write := range late {
			t.Errorf("round %d: %s wrote after %s took over: %s %s %s (status %d) %s after the takeover",
				round, leader.name, other.name, write.Verb, write.Resource, write.Name, write.Status, write.At.Sub(acquired).Round(time.Millisecond))
		}
		start(leader)
	}
	for _, service := range stopCreating() {
		if err := deleteService(service); err != nil {
			t.Fatal(err)
		}
	}
	for _, service := range services {
		waitForServiceGone(t, service)
	}
}

// leaseHolder returns the holder of the CCM's leader lease.
func leaseHolder(t *testing.T) string {
	t.Helper()
	lease, err := stack.TargetClientset.CoordinationV1().Leases("kube-system").Get(context.Background(), "cloud-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// waitForNewLeaseHolder waits until another replica than holder holds the CCM's leader lease,
// and returns when it acquired it, by its own clock: this machine's.
func waitForNewLeaseHolder(t *testing.T, holder string) time.Time {
	t.Helper()
	var acquired time.Time
	testenv.Await(t, context.Background(), waitTimeout, "another replica to acquire the lease", func(ctx context.Context) error {
		lease, err := stack.TargetClientset.CoordinationV1().Leases("kube-system").Get(ctx, "cloud-controller-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if now := ptr.Deref(lease.Spec.HolderIdentity, ""); now == holder || lease.Spec.AcquireTime == nil {
			return fmt.Errorf("still held by %s", now)
		}
		acquired = lease.Spec.AcquireTime.Time
		return nil
	})
	return acquired
}

// waitForWrites waits until the proxy has forwarded a write that arrived after since.
func waitForWrites(t *testing.T, proxy *apiproxy.Proxy, since time.Time, what string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, what, func(context.Context) error {
		writes := proxy.Writes()
		if len(writes) == 0 || !writes[len(writes)-1].At.After(since) {
			return fmt.Errorf("no write yet")
		}
		return nil
	})
}

// startReplicas runs two replicas with leader election, <prefix>-1 and <prefix>-2, and returns
// them once one leads, the leader first.
func startReplicas(t *testing.T, prefix string) (leader, follower *testenv.Process) {
	t.Helper()
	args := append(leaderElectionArgs(), routeArgs()...)
	first := startCCMWithoutCrashCheck(t, prefix+"-1", args...)
	second := startCCMWithoutCrashCheck(t, prefix+"-2", args...)
	leader = waitForLeader(t, first, second)
	if leader == first {
		return leader, second
	}
	return leader, first
}
