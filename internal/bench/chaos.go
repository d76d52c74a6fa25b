package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// ChaosOptions describe a churn-and-chaos run: two CCM replicas with leader election serve
// Services created, edited and deleted in waves while Nodes join and leave, the leader is
// killed or paused, IronCore and the target cluster's API fail a share of requests, and the
// simulated providers fall silent.
type ChaosOptions struct {
	// Nodes is how many Nodes the cluster has at any time; one leaves and one joins per wave.
	Nodes int
	// Services is how many Services are created in all, spread over Waves.
	Services, Waves int
	// Disruptions is how many times per wave the leader is killed (SIGKILL) or paused past
	// its lease (SIGSTOP, then SIGCONT), in turn.
	Disruptions int
	// FaultRate is the share of IronCore requests failed while faults are on.
	FaultRate float64
	// Seed makes the choices and fault draws repeatable.
	Seed uint64
	// Latency is how long the simulated IronCore providers take to report each change.
	Latency time.Duration
	// Selecting runs the replicas with --use-nic-selector=true: IronCore routes the Services
	// that are not Local by the target label. Otherwise the CCM writes every routing, the
	// default.
	Selecting bool
	// Slack is added to the calm time a Node unable to serve may keep traffic (unservableBound)
	// and to the time its drops stay excused after it is back. make chaos measures the CCM
	// against the bound itself, with none; the smoke test, which runs with the race detector on
	// whatever machine runs the tests, checks that such Nodes leave at all, with some.
	Slack    time.Duration
	Progress io.Writer
	Alone    bool
}

// unservableBound is how long, of calm time, a Node unable to serve may keep traffic in this
// run.
func (o ChaosOptions) unservableBound() time.Duration { return unservableBound + o.Slack }

// leaderElection are the replicas' lease timings: short, so that a takeover is quick.
func leaderElection() []string {
	return []string{
		"--leader-elect=true",
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
	}
}

// chaosLease is the CCM's leader lease.
const chaosLeaseNamespace, chaosLeaseName = "kube-system", "cloud-controller-manager"

// RunChaos runs the churn-and-chaos scenario once.
func RunChaos(ctx context.Context, opts ChaosOptions) (*ChaosResult, error) {
	if opts.Nodes < 2 || opts.Services < opts.Waves || opts.Waves < 2 {
		return nil, fmt.Errorf("the chaos run needs at least 2 Nodes, 2 waves and a Service per wave")
	}
	c := &chaos{opts: opts, random: mathrand.New(mathrand.NewPCG(opts.Seed, opts.Seed^0x5bd1e995)), //nolint:gosec // repeatable test choices
		present: map[string]bool{}, leaving: map[string]bool{}, services: map[string]*chaosService{}, drops: map[string]time.Time{},
		byLoadBalancer: map[string]*chaosService{}, excused: map[string]bool{}, excusedUntil: map[string]time.Time{}, handEdits: map[string]bool{}, seen: map[string]seenRouting{}, podCIDRs: map[string][]string{},
		unservable: map[string]map[string]time.Time{}, unservableHeld: map[string]bool{}, everReady: map[string]bool{}, labelled: map[string]bool{}}
	c.result = &ChaosResult{Date: time.Now().UTC().Truncate(time.Second), Machine: describeMachine(), Options: opts,
		FaultsInjected: map[string]int{}, TargetFaultsInjected: map[string]int{}}
	stack, err := testenv.Start(ctx, testenv.Options{Progress: opts.Progress, SimulatorLatency: opts.Latency, Purpose: purpose(opts.Alone)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = stack.Stop() }()
	c.stack = stack
	started := time.Now()
	err = c.run(ctx)
	c.stopReplicas()
	if err != nil {
		return nil, err
	}
	c.result.DurationSeconds = newSeconds(time.Since(started))
	return c.result, nil
}

// chaos is the state of one run.
type chaos struct {
	opts     ChaosOptions
	stack    *testenv.Stack
	random   *mathrand.Rand
	binary   string
	replicas []*chaosReplica
	started  time.Time
	result   *ChaosResult

	mu sync.Mutex
	// present Nodes are in the cluster and not leaving; leaving ones have had their Machine
	// deleted; nodeIPs are each Node's NetworkInterface addresses.
	present, leaving map[string]bool
	nodeIPs          map[string][]string
	nextNode         int
	services         map[string]*chaosService
	// byLoadBalancer finds a Service by its LoadBalancer's name.
	byLoadBalancer map[string]*chaosService
	faultsOn       bool
	// drops are the destinations of present Nodes that a routing lost, by routing and IP,
	// with when; they end when the destination is back.
	drops map[string]time.Time
	// excused Nodes are disturbed on purpose (unhealthy, or their target label removed by
	// hand): routings leave them by design. handEdits are destinations removed by hand, by
	// routing and key.
	excused, handEdits map[string]bool
	// excusedUntil is when a pardoned Node's excuse ends, in selector mode (pardon).
	excusedUntil map[string]time.Time
	// podCIDRs are the pod CIDRs of each Node in the cluster, as the watch last saw them.
	podCIDRs map[string][]string
	// unservable holds, by NetworkInterface, why its Node cannot serve and since when, as the
	// watches saw it; unservableHeld, the routings already found holding one too long;
	// everReady, the Nodes that have been Ready.
	unservable     map[string]map[string]time.Time
	unservableHeld map[string]bool
	everReady      map[string]bool
	// labelled are the NetworkInterfaces that carry the target label, as the watch saw them.
	labelled map[string]bool
	// faultWindows are the times faults were on.
	faultWindows []faultWindow
	// seen holds each routing's destinations (by destinationKey) as the drop detector last saw
	// them. Waits read this rather than the watch's store: the store runs ahead of the handlers,
	// and a Node pardoned on what the store shows could then be blamed for a drop the handler
	// had not yet seen.
	seen map[string]seenRouting
}

// seenRouting is a routing as the drop detector last saw it: its destinations by
// destinationKey, and its resourceVersion (an etcd revision), so a wait can tell whether the
// detector has seen a write yet.
type seenRouting struct {
	destinations map[string]bool
	version      uint64
}

// seeRouting records a routing as the drop detector saw it. The caller holds c.mu.
func (c *chaos) seeRouting(routing *networkingv1alpha1.LoadBalancerRouting) {
	version, _ := strconv.ParseUint(routing.ResourceVersion, 10, 64)
	c.seen[routing.Name] = seenRouting{destinations: destinations(routing), version: version}
}

// chaosService is what a Service should have.
type chaosService struct {
	service  *corev1.Service
	internal bool
	ports    []int32
	wave     int
	// local is externalTrafficPolicy Local, with endpoints on the Nodes in endpoints: its
	// routing holds those Nodes only. It is set before the Service turns Local, and cleared
	// once it has turned back.
	local     bool
	endpoints []string
}

func (c *chaos) log(format string, args ...any) {
	fmt.Fprintf(c.opts.Progress, "[%6.1fs] %s\n", time.Since(c.started).Seconds(), fmt.Sprintf(format, args...))
}

func (c *chaos) problem(format string, args ...any) {
	message := fmt.Sprintf(format, args...)
	c.mu.Lock()
	c.result.Problems = append(c.result.Problems, message)
	c.mu.Unlock()
	c.log("PROBLEM: %s", message)
}

func (c *chaos) run(ctx context.Context) error {
	c.started = time.Now()
	c.log("creating %d Machines...", c.opts.Nodes)
	if err := createMachines(ctx, c.stack, c.opts.Nodes, true); err != nil {
		return err
	}
	c.nextNode = c.opts.Nodes
	// Every other Node gets its pod CIDR from IronCore's IPAM, through the CCM; the others have
	// theirs set when they register, outside the parent.
	if _, err := c.stack.CreateRootPrefix(ctx, chaosPodParent, chaosPodParentCIDR, nil); err != nil {
		return err
	}
	var err error
	if c.stack.CloudConfig, err = c.stack.WriteCloudConfig("chaos", "podCIDRParentPrefix: "+chaosPodParent+"\n"); err != nil {
		return err
	}
	c.log("building the CCM...")
	if c.binary, err = testenv.BuildCCM(ctx, c.stack.Dir, false); err != nil {
		return err
	}
	for _, name := range []string{"replica-a", "replica-b"} {
		replica := &chaosReplica{name: name, chaos: c}
		if replica.proxy, replica.kubeconfig, err = c.stack.StartIronCoreProxy(name); err != nil {
			return err
		}
		if replica.targetProxy, replica.targetKubeconfig, err = c.stack.StartTargetProxy(name); err != nil {
			return err
		}
		if err := replica.start(); err != nil {
			return err
		}
		c.replicas = append(c.replicas, replica)
	}
	c.result.Command = strings.Join(c.replicas[0].args(), " ")
	for _, path := range []string{c.replicas[0].kubeconfig, c.replicas[0].targetKubeconfig} {
		c.result.Command = strings.ReplaceAll(c.result.Command, path, "<its proxy's kubeconfig>")
	}
	if err := parallel(c.opts.Nodes, func(i int) error { return c.addNode(ctx, i) }); err != nil {
		return err
	}
	if err := waitForInitializedNodes(ctx, c.stack, c.opts.Nodes); err != nil {
		return fmt.Errorf("%w\n%s", err, c.describeReplicas())
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	if err := c.watch(watchCtx); err != nil {
		return err
	}
	go c.superviseReplicas(watchCtx)
	go c.sample(watchCtx)

	perWave := c.opts.Services / c.opts.Waves
	for wave := 0; wave < c.opts.Waves; wave++ {
		count := perWave
		if wave == c.opts.Waves-1 {
			count = c.opts.Services - perWave*(c.opts.Waves-1)
		}
		if err := c.wave(ctx, wave, wave*perWave, count); err != nil {
			return fmt.Errorf("wave %d: %w", wave+1, err)
		}
	}
	c.setFaults(false)
	c.stack.Simulator.SetSilent(false)
	c.log("chaos over; waiting for everything to be right...")
	calm := time.Now()
	if err := c.waitForConvergence(ctx); err != nil {
		c.problem("not converged 5 minutes after the chaos: %v", err)
	} else {
		c.result.ConvergenceSeconds = newSeconds(time.Since(calm))
		c.log("everything right %s after the chaos ended", time.Since(calm).Round(time.Millisecond))
	}
	c.checkPodCIDRs(ctx)
	c.checkLeftNodes(ctx)
	c.log("deleting the remaining Services...")
	if err := c.deleteAll(ctx); err != nil {
		return err
	}
	c.checkLeftovers(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, since := range c.drops {
		c.result.TargetDrops = append(c.result.TargetDrops, newSeconds(time.Since(since)))
		c.result.Problems = append(c.result.Problems, "routing destination still missing at the end: "+key)
	}
	for _, replica := range c.replicas {
		injected := replica.proxy.Injected()
		for kind, n := range injected {
			c.result.FaultsInjected[string(kind)] += n
		}
	}
	for _, replica := range c.replicas {
		for kind, n := range replica.targetProxy.Injected() {
			c.result.TargetFaultsInjected[string(kind)] += n
		}
	}
	slices.Sort(c.result.TargetDrops)
	return nil
}

// wave creates count Services, edits the previous wave's, deletes the one before, lets one
// Node leave and another join, and disrupts the leader, with faults on for the wave.
func (c *chaos) wave(ctx context.Context, wave, first, count int) error {
	c.log("wave %d: %d new Services, faults on", wave+1, count)
	c.setFaults(true)
	disruptions, targets := make(chan error, 1), make(chan error, 1)
	go func() { disruptions <- c.disruptions(ctx, wave) }()

	created := make([]string, count)
	err := parallel(count, func(i int) error {
		name := serviceName(first + i)
		internal := c.pick(5) == 0
		opts := testenv.ServiceOptions{}
		if internal {
			opts.Annotations = map[string]string{keys.AnnotationInternalLoadBalancer: "true"}
		}
		if c.pick(3) == 0 {
			// The CCM's own class is served as class-less Services are, type switches included.
			opts.LoadBalancerClass = lbclass.Name
		}
		service, err := c.stack.CreateLoadBalancerService(ctx, name, opts)
		if err != nil {
			return err
		}
		state := &chaosService{service: service, internal: internal, ports: []int32{80}, wave: wave}
		c.mu.Lock()
		c.services[name] = state
		// A type switch replaces the LoadBalancer with one named after the new type.
		lbName := strings.ReplaceAll(string(service.UID), "-", "")
		for _, name := range []string{lbName, lbName + "-internal", lbName + "-public"} {
			c.byLoadBalancer[name] = state
		}
		c.mu.Unlock()
		created[i] = name
		return nil
	})
	if err != nil {
		return err
	}
	c.result.ServicesCreated += count
	go func() { targets <- c.targetChaos(ctx, wave) }()
	if err := c.nodeChurn(ctx); err != nil {
		return err
	}
	if err := c.editWave(ctx, wave-1); err != nil {
		return err
	}
	if err := c.deleteWave(ctx, wave-2); err != nil {
		return err
	}
	c.stack.Simulator.SetSilent(true)
	c.result.SilentPeriods++
	time.Sleep(5 * time.Second) // the providers stay silent this long: part of the scenario
	c.stack.Simulator.SetSilent(false)
	if err := errors.Join(<-disruptions, <-targets); err != nil {
		return err
	}
	c.setFaults(false)
	// Once this wave's Services have their addresses, and the Nodes' ability to serve was
	// disturbed with faults off, the next wave starts.
	var missing []*corev1.Service
	err = testenv.WaitFor(ctx, 5*time.Minute, fmt.Sprintf("wave %d's Services to have addresses", wave+1), func(ctx context.Context) error {
		missing = nil
		for _, name := range created {
			service, err := c.stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(service.Status.LoadBalancer.Ingress) == 0 {
				missing = append(missing, service)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d without", len(missing))
		}
		return nil
	})
	if err != nil {
		var b strings.Builder
		for _, service := range missing {
			lbName := strings.ReplaceAll(string(service.UID), "-", "")
			fmt.Fprintf(&b, "Service %s (UID %s, class %v, finalizers %v): %s\n", service.Name, service.UID, service.Spec.LoadBalancerClass,
				service.Finalizers, c.describeLoadBalancer(ctx, lbName))
		}
		return fmt.Errorf("%w\n%s%s", err, b.String(), c.describeReplicas())
	}
	c.log("wave %d: faults off; Nodes made unable to serve", wave+1)
	return c.servingChaos(ctx)
}

func (c *chaos) pick(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.random.IntN(n)
}

// setFaults switches the faults on both APIs on or off.
func (c *chaos) setFaults(on bool) {
	c.mu.Lock()
	switch {
	case on && !c.faultsOn:
		c.faultWindows = append(c.faultWindows, faultWindow{start: time.Now()})
	case !on && c.faultsOn:
		c.faultWindows[len(c.faultWindows)-1].end = time.Now()
	}
	c.faultsOn = on
	seed := c.random.Uint64()
	c.mu.Unlock()
	var ironcore, target []apiproxy.Fault
	if on {
		ironcore, target = Faults(c.opts.FaultRate)
	}
	for i, replica := range c.replicas {
		replica.proxy.SetFaults(seed+uint64(i), ironcore...)
		replica.targetProxy.SetFaults(seed+uint64(i)+7, target...)
	}
}

// slowFault is how long a slow request is held before it is forwarded.
const slowFault = 2 * time.Second

// Faults are the faults of a run at rate: IronCore fails rate of its requests with 500s, and
// half that with 409s to writes, resets and 2 s delays, a fiftieth with hangs; the target
// cluster's API fails a fifth of rate with 500s and a tenth with resets (not hangs: the
// framework's controllers read it without deadlines).
func Faults(rate float64) (ironcore, target []apiproxy.Fault) {
	writes := func(r apiproxy.Request) bool { return isWrite(r.Verb) }
	ironcore = []apiproxy.Fault{
		{Kind: apiproxy.ServerError, Rate: rate},
		{Kind: apiproxy.Conflict, Rate: rate / 2, Match: writes},
		{Kind: apiproxy.Reset, Rate: rate / 2},
		{Kind: apiproxy.Slow, Rate: rate / 2, Delay: slowFault},
		{Kind: apiproxy.Hang, Rate: rate / 50},
	}
	target = []apiproxy.Fault{
		{Kind: apiproxy.ServerError, Rate: rate / 5},
		{Kind: apiproxy.Reset, Rate: rate / 10},
	}
	return ironcore, target
}

// disruptions kills or pauses the leader Disruptions times at random moments of the wave.
func (c *chaos) disruptions(ctx context.Context, wave int) error {
	for i := 0; i < c.opts.Disruptions; i++ {
		delay := time.Duration(500+c.pick(3000)) * time.Millisecond
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		pause := (wave*c.opts.Disruptions+i)%2 == 1
		if err := c.disrupt(ctx, pause); err != nil {
			return err
		}
	}
	return nil
}

// pauseWait is how long a pause waits for the leader to start a write, to pause it there.
const pauseWait = 20 * time.Second

// disrupt kills the leader right after it wrote to IronCore, or pauses it in the middle of a
// write to either API, measures the takeover, checks that a paused leader writes nothing of
// any kind once the other leads, and restarts it.
func (c *chaos) disrupt(ctx context.Context, pause bool) error {
	leader, holder, err := c.leader(ctx)
	if err != nil {
		return err
	}
	other := c.replicas[0]
	if other == leader {
		other = c.replicas[1]
	}
	kind := "kill"
	var (
		at       time.Time
		pausedAt string
	)
	if pause {
		kind = "pause"
		leader.planned(true)
		// In the middle of a write: as one arrives at either API, before it is forwarded.
		write, err := leader.process().PauseAtWrite(pauseWait, func(write apiproxy.Write) bool {
			return write.Resource != "leases.coordination.k8s.io"
		}, leader.proxy, leader.targetProxy)
		if err != nil {
			// An idle leader: paused all the same, and counted as such.
			c.log("%v; pausing it idle", err)
			if err := leader.process().Pause(); err != nil {
				return err
			}
		} else {
			pausedAt = strings.TrimSpace(write.Verb + " " + write.Resource + " " + write.Name)
		}
		at = time.Now()
	} else {
		// In the middle of its work: right after a write, or after a second without one.
		since := time.Now()
		_ = testenv.WaitFor(ctx, time.Second, "a write", func(context.Context) error {
			if writes := leader.proxy.Writes(); len(writes) == 0 || !writes[len(writes)-1].At.After(since) {
				return errors.New("none")
			}
			return nil
		})
		at = time.Now()
		leader.kill()
	}
	acquired, err := waitForLeaseChange(ctx, c.stack, holder)
	if err != nil {
		return err
	}
	takeover := Takeover{Kind: kind, AtSeconds: newSeconds(at.Sub(c.started)), TakeoverSeconds: newSeconds(acquired.Sub(at)), PausedAt: pausedAt}
	if pause {
		_ = testenv.WaitFor(ctx, 10*time.Second, "the new leader to write", func(context.Context) error {
			if writes := other.proxy.Writes(); len(writes) == 0 || !writes[len(writes)-1].At.After(acquired) {
				return errors.New("none")
			}
			return nil
		})
		process := leader.process()
		if err := process.Resume(); err != nil {
			return err
		}
		select {
		case <-process.Exited():
		case <-time.After(time.Minute):
			c.problem("%s went on running a minute after it lost its lease while paused", process.Name)
			leader.kill()
		}
		for _, write := range append(leader.proxy.Writes(), leader.targetProxy.Writes()...) {
			switch {
			case !write.At.After(acquired):
			case refusedRenewal(write):
				// Its leader election renewing from the lease it knew: the API server's
				// resourceVersion check refuses it, which is the fence on the lease itself.
				takeover.RenewalsRefused++
			case write.Cut:
				// Sent as it resumed from between the fence's check and the send: its
				// connection ended there, before the request was whole.
				takeover.CutAfterTakeover++
			default:
				takeover.WritesAfterTakeover++
				c.problem("%s wrote after %s took over: %s %s %s (status %d)", leader.name, other.name, write.Verb, write.Resource, write.Name, write.Status)
			}
		}
	}
	c.mu.Lock()
	c.result.Takeovers = append(c.result.Takeovers, takeover)
	c.mu.Unlock()
	c.log("%s of the leader %s: %s took over after %s", kind, leader.name, other.name, acquired.Sub(at).Round(time.Millisecond))
	return leader.start()
}

// leader returns the replica that holds the lease, and its holder identity: the one whose
// target proxy forwarded the last successful write of the lease, if it runs.
func (c *chaos) leader(ctx context.Context) (*chaosReplica, string, error) {
	var leader *chaosReplica
	var holder string
	err := testenv.WaitFor(ctx, 2*time.Minute, "a replica to hold the lease", func(ctx context.Context) error {
		lease, err := c.stack.TargetClientset.CoordinationV1().Leases(chaosLeaseNamespace).Get(ctx, chaosLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		holder = ptr.Deref(lease.Spec.HolderIdentity, "")
		var last time.Time
		leader = nil
		for _, replica := range c.replicas {
			if renewed := replica.lastLeaseWrite(); renewed.After(last) {
				last, leader = renewed, replica
			}
		}
		if leader == nil || !leader.running() || time.Since(last) > 2*time.Second {
			return fmt.Errorf("no running replica renews the lease held by %q", holder)
		}
		return nil
	})
	return leader, holder, err
}

// waitForLeaseChange waits until another replica than holder holds the lease, and returns
// when it acquired it by its own clock, this machine's.
func waitForLeaseChange(ctx context.Context, stack *testenv.Stack, holder string) (time.Time, error) {
	var acquired time.Time
	err := testenv.WaitFor(ctx, 2*time.Minute, "another replica to take the lease", func(ctx context.Context) error {
		lease, err := stack.TargetClientset.CoordinationV1().Leases(chaosLeaseNamespace).Get(ctx, chaosLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ptr.Deref(lease.Spec.HolderIdentity, "") == holder || lease.Spec.AcquireTime == nil {
			return errors.New("not yet")
		}
		acquired = lease.Spec.AcquireTime.Time
		return nil
	})
	return acquired, err
}

// nodeChurn lets the oldest present Node leave (its Machine is deleted; the CCM deletes the
// Node) and a new one join.
func (c *chaos) nodeChurn(ctx context.Context) error {
	c.mu.Lock()
	var oldest string
	for name := range c.present {
		if oldest == "" || name < oldest {
			oldest = name
		}
	}
	delete(c.present, oldest)
	c.leaving[oldest] = true
	next := c.nextNode
	c.nextNode++
	c.mu.Unlock()
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: c.stack.Namespace, Name: oldest}}
	if err := c.stack.IronCore.Client.Delete(ctx, machine); err != nil {
		return fmt.Errorf("delete Machine %s: %w", oldest, err)
	}
	// Its kubelet is gone with it: the Node stops being Ready, and only then does the CCM
	// look whether its Machine still exists.
	if _, err := c.stack.SetNodeReady(ctx, oldest, corev1.ConditionUnknown); err != nil {
		return err
	}
	c.result.NodesLeft++
	if err := c.moveEndpointsOff(ctx, oldest); err != nil {
		return err
	}
	if err := c.runMachine(ctx, next); err != nil {
		return err
	}
	c.result.NodesJoined++
	return c.addNode(ctx, next)
}

// runMachine creates the Machine of Node i and waits until it runs with an address.
func (c *chaos) runMachine(ctx context.Context, i int) error {
	pools := []string{"pool-a", "pool-b"}
	if _, err := c.stack.CreateMachine(ctx, nodeName(i), testenv.MachineOptions{Pool: pools[i%2]}); err != nil {
		return err
	}
	return testenv.WaitFor(ctx, 5*time.Minute, "Machine "+nodeName(i)+" to run with an address", func(ctx context.Context) error {
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := c.stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: c.stack.Namespace, Name: testenv.NetworkInterfaceName(nodeName(i))}, nic); err != nil {
			return err
		}
		if len(nic.Status.IPs) == 0 {
			return errors.New("no address yet")
		}
		return nil
	})
}

// The parent of the pod CIDRs IronCore's IPAM allocates: inside the cluster CIDR, apart from
// the pod CIDRs Nodes register with (podCIDR).
const chaosPodParent, chaosPodParentCIDR = "chaos-pods-v4", "10.192.0.0/10"

// allocated tells the Nodes whose pod CIDR IronCore's IPAM allocates: every other one.
func allocated(i int) bool { return i%2 == 1 }

// addNode registers Node i, whose Machine runs, Ready, with its pod CIDR or, for one that
// IronCore allocates, without.
func (c *chaos) addNode(ctx context.Context, i int) error { return c.addNodeWith(ctx, i, false) }

// addNodeWith is addNode, NotReady if notReady, as a kubelet registers a Node on its first
// start.
func (c *chaos) addNodeWith(ctx context.Context, i int, notReady bool) error {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := c.stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: c.stack.Namespace, Name: testenv.NetworkInterfaceName(nodeName(i))}, nic); err != nil {
		return fmt.Errorf("NetworkInterface of %s: %w", nodeName(i), err)
	}
	var ips []string
	for _, ip := range nic.Status.IPs {
		ips = append(ips, ip.String())
	}
	c.mu.Lock()
	if c.nodeIPs == nil {
		c.nodeIPs = map[string][]string{}
	}
	c.nodeIPs[nodeName(i)] = ips
	c.present[nodeName(i)] = true
	c.mu.Unlock()
	options := testenv.NodeOptions{PodCIDRs: []string{podCIDR(i)}, NotReady: notReady}
	if allocated(i) {
		options.PodCIDRs = nil
	}
	_, err := c.stack.CreateNode(ctx, nodeName(i), options)
	return err
}

// editWave changes every Service of a wave: ports, and for one in four the type (Public to
// Internal or back), and an annotation the CCM does not read.
func (c *chaos) editWave(ctx context.Context, wave int) error {
	names := c.servicesOf(wave)
	err := parallel(len(names), func(i int) error {
		name := names[i]
		switchType, switchPolicy := c.pick(4) == 0, c.pick(4) == 0
		c.mu.Lock()
		state := c.services[name]
		internal, local := state.internal != switchType, state.local != switchPolicy
		ports := []int32{80, 443}
		if len(state.ports) == 2 {
			ports = []int32{8080}
		}
		c.mu.Unlock()
		if local && !state.local {
			// The endpoints are there before the policy turns Local, as for a Service
			// whose pods run.
			if err := c.placeEndpoints(ctx, state); err != nil {
				return err
			}
			c.mu.Lock()
			state.local = true
			c.mu.Unlock()
		}
		updated, err := c.updateService(ctx, name, func(service *corev1.Service) {
			service.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
			service.Spec.HealthCheckNodePort = 0
			if local {
				service.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}
			if service.Annotations == nil {
				service.Annotations = map[string]string{}
			}
			service.Annotations["example.org/edited"] = time.Now().Format(time.RFC3339Nano)
			if internal {
				service.Annotations[keys.AnnotationInternalLoadBalancer] = "true"
			} else {
				delete(service.Annotations, keys.AnnotationInternalLoadBalancer)
			}
			service.Spec.Ports = nil
			for _, port := range ports {
				service.Spec.Ports = append(service.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", port), Protocol: corev1.ProtocolTCP, Port: port})
			}
		})
		if err != nil {
			return err
		}
		c.mu.Lock()
		state.service, state.internal, state.ports, state.local = updated, internal, ports, local
		if switchType {
			c.result.TypeSwitches++
		}
		if switchPolicy {
			c.result.PolicySwitches++
		}
		c.mu.Unlock()
		return nil
	})
	c.result.ServicesEdited += len(names)
	return err
}

// placeEndpoints gives a Service an EndpointSlice with endpoints on two present Nodes, as the
// EndpointSlice controller would for pods there.
func (c *chaos) placeEndpoints(ctx context.Context, state *chaosService) error {
	c.mu.Lock()
	var present []string
	for node := range c.present {
		present = append(present, node)
	}
	slices.Sort(present)
	first := c.random.IntN(len(present))
	nodes := []string{present[first], present[(first+1)%len(present)]}
	state.endpoints = nodes
	service := state.service
	c.mu.Unlock()
	var endpoints []testenv.Endpoint
	for i, node := range nodes {
		endpoints = append(endpoints, testenv.Endpoint{IP: fmt.Sprintf("10.200.%d.%d", c.pick(250), i+1), Node: node, Ready: true, Serving: true})
	}
	return c.stack.SetEndpoints(ctx, service, endpoints)
}

func (c *chaos) updateService(ctx context.Context, name string, change func(*corev1.Service)) (*corev1.Service, error) {
	services := c.stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault)
	for {
		service, err := services.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		change(service)
		updated, err := services.Update(ctx, service, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		return updated, err
	}
}

func (c *chaos) servicesOf(wave int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for name, state := range c.services {
		if state.wave == wave {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// deleteWave deletes every Service of a wave.
func (c *chaos) deleteWave(ctx context.Context, wave int) error {
	names := c.servicesOf(wave)
	err := parallel(len(names), func(i int) error {
		err := c.stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, names[i], metav1.DeleteOptions{})
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		c.mu.Lock()
		delete(c.services, names[i])
		c.mu.Unlock()
		return nil
	})
	c.result.ServicesDeleted += len(names)
	return err
}

// deleteAll deletes the remaining Services and waits until they are gone.
func (c *chaos) deleteAll(ctx context.Context) error {
	for wave := 0; wave < c.opts.Waves; wave++ {
		if err := c.deleteWave(ctx, wave); err != nil {
			return err
		}
	}
	return testenv.WaitFor(ctx, 5*time.Minute, "every Service to be gone", func(ctx context.Context) error {
		services, err := c.stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if n := len(services.Items) - 1; n > 0 { // the kubernetes Service stays
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}

// waitForConvergence waits until every Service has exactly one IronCore LoadBalancer of the
// right type with its ports, its address is the LoadBalancer's, and its routing reaches every
// present Node.
func (c *chaos) waitForConvergence(ctx context.Context) error {
	return testenv.WaitFor(ctx, 5*time.Minute, "every Service to be served right", func(ctx context.Context) error {
		wrong := c.wrongServices(ctx)
		if len(wrong) > 0 {
			return fmt.Errorf("%d Services not right, e.g. %s", len(wrong), wrong[0])
		}
		return nil
	})
}

func (c *chaos) wrongServices(ctx context.Context) []string {
	lbs := &networkingv1alpha1.LoadBalancerList{}
	routings := &networkingv1alpha1.LoadBalancerRoutingList{}
	if err := c.stack.ListIronCore(ctx, []client.ObjectList{lbs, routings}); err != nil {
		return []string{err.Error()}
	}
	byUID := map[string][]networkingv1alpha1.LoadBalancer{}
	for _, lb := range lbs.Items {
		if lb.DeletionTimestamp == nil {
			byUID[lb.Annotations[keys.AnnotationServiceUID]] = append(byUID[lb.Annotations[keys.AnnotationServiceUID]], lb)
		}
	}
	routed := map[string]map[string]bool{}
	for _, routing := range routings.Items {
		routed[routing.Name] = destinations(&routing)
	}
	list, err := c.stack.TargetClientset.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{err.Error()}
	}
	services := map[string]*corev1.Service{}
	for i := range list.Items {
		services[list.Items[i].Name] = &list.Items[i]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var wrong []string
	for name, state := range c.services {
		service, ok := services[name]
		if !ok {
			wrong = append(wrong, name+" is gone")
			continue
		}
		own := byUID[string(service.UID)]
		if len(own) != 1 {
			wrong = append(wrong, fmt.Sprintf("%s has %d IronCore LoadBalancers", name, len(own)))
			continue
		}
		lb := own[0]
		wantType := networkingv1alpha1.LoadBalancerTypePublic
		if state.internal {
			wantType = networkingv1alpha1.LoadBalancerTypeInternal
		}
		var ports []int32
		for _, port := range lb.Spec.Ports {
			ports = append(ports, port.Port)
		}
		slices.Sort(ports)
		var lbIPs []string
		for _, ip := range lb.Status.IPs {
			lbIPs = append(lbIPs, ip.String())
		}
		ingress := testenv.IngressIPs(service)
		switch {
		case lb.Spec.Type != wantType:
			wrong = append(wrong, fmt.Sprintf("%s has a %s LoadBalancer, want %s", name, lb.Spec.Type, wantType))
		case !slices.Equal(ports, state.ports):
			wrong = append(wrong, fmt.Sprintf("%s's LoadBalancer has ports %v, want %v", name, ports, state.ports))
		case len(ingress) == 0 || !slices.Equal(ingress, lbIPs):
			wrong = append(wrong, fmt.Sprintf("%s has addresses %v, its LoadBalancer %v", name, ingress, lbIPs))
		default:
			// The routing holds exactly the NetworkInterfaces of the present Nodes (of a Local
			// Service, those with its endpoints).
			want := map[string]bool{}
			for node := range c.present {
				if !state.local || slices.Contains(state.endpoints, node) {
					want["nic:"+testenv.NetworkInterfaceName(node)] = true
				}
			}
			for key := range want {
				if !routed[lb.Name][key] {
					wrong = append(wrong, fmt.Sprintf("%s's routing lacks %s", name, key))
				}
			}
			for key := range routed[lb.Name] {
				if !want[key] {
					wrong = append(wrong, fmt.Sprintf("%s's routing has %s, which it should not", name, key))
				}
			}
		}
	}
	slices.Sort(wrong)
	return wrong
}

// checkPodCIDRs checks that every present Node has its pod CIDR (one IronCore allocates, for
// every other Node), and that it is on the Node's NetworkInterface exactly once and on no other.
func (c *chaos) checkPodCIDRs(ctx context.Context) {
	err := testenv.WaitFor(ctx, 2*time.Minute, "every pod CIDR on its NetworkInterface", func(ctx context.Context) error {
		nics := &networkingv1alpha1.NetworkInterfaceList{}
		if err := c.stack.IronCore.Client.List(ctx, nics, client.InNamespace(c.stack.Namespace)); err != nil {
			return err
		}
		where := map[string][]string{}
		for _, nic := range nics.Items {
			for _, prefix := range nic.Spec.Prefixes {
				if prefix.Value != nil {
					where[prefix.Value.String()] = append(where[prefix.Value.String()], nic.Name)
				}
			}
		}
		// An allocated pod CIDR is on its NetworkInterface as the Prefix of an ephemeral entry.
		prefixes := &ipamv1alpha1.PrefixList{}
		if err := c.stack.IronCore.Client.List(ctx, prefixes, client.InNamespace(c.stack.Namespace), client.HasLabels{keys.LabelPodCIDR}); err != nil {
			return err
		}
		for _, prefix := range prefixes.Items {
			owner := metav1.GetControllerOf(&prefix)
			if owner == nil || owner.Kind != "NetworkInterface" || !prefix.DeletionTimestamp.IsZero() ||
				prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated || prefix.Spec.Prefix == nil {
				continue
			}
			cidr := prefix.Spec.Prefix.Masked().String()
			where[cidr] = append(where[cidr], owner.Name)
		}
		nodes, err := c.stack.TargetClientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		podCIDRs := map[string][]string{}
		for _, node := range nodes.Items {
			podCIDRs[node.Name] = node.Spec.PodCIDRs
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.result.PodCIDRsChecked, c.result.PodCIDRsAllocated = 0, 0
		for i := 0; i < c.nextNode; i++ {
			name := nodeName(i)
			if !c.present[name] {
				continue
			}
			cidrs := podCIDRs[name]
			if len(cidrs) == 0 {
				return fmt.Errorf("node %s has no pod CIDR", name)
			}
			if allocated(i) {
				c.result.PodCIDRsAllocated++
			} else if !slices.Equal(cidrs, []string{podCIDR(i)}) {
				return fmt.Errorf("node %s has the pod CIDRs %v, want the %s it registered with", name, cidrs, podCIDR(i))
			}
			for _, cidr := range cidrs {
				c.result.PodCIDRsChecked++
				if got := where[cidr]; !slices.Equal(got, []string{testenv.NetworkInterfaceName(name)}) {
					return fmt.Errorf("pod CIDR %s of %s is on %v", cidr, name, got)
				}
			}
		}
		return nil
	})
	if err != nil {
		c.problem("%v", err)
	}
}

// checkLeftNodes waits until the CCM has deleted every Node whose Machine was deleted.
func (c *chaos) checkLeftNodes(ctx context.Context) {
	c.mu.Lock()
	var left []string
	for name := range c.leaving {
		left = append(left, name)
	}
	c.mu.Unlock()
	err := testenv.WaitFor(ctx, 2*time.Minute, "the Nodes of deleted Machines to be deleted", func(ctx context.Context) error {
		remaining := 0
		for _, name := range left {
			_, err := c.stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return err
			default:
				remaining++
			}
		}
		c.result.LeftNodesDeleted = len(left) - remaining
		if remaining > 0 {
			return fmt.Errorf("%d of %d still there", remaining, len(left))
		}
		return nil
	})
	if err != nil {
		c.problem("%v", err)
	}
}

// checkLeftovers waits for IronCore's garbage collector and counts the LoadBalancers,
// routings and LoadBalancer IP Prefixes left without a Service.
func (c *chaos) checkLeftovers(ctx context.Context) {
	var left []string
	err := testenv.WaitFor(ctx, 3*time.Minute, "no IronCore LoadBalancer objects left", func(ctx context.Context) error {
		lbs := &networkingv1alpha1.LoadBalancerList{}
		routings := &networkingv1alpha1.LoadBalancerRoutingList{}
		prefixes := &ipamv1alpha1.PrefixList{}
		if err := c.stack.ListIronCore(ctx, []client.ObjectList{lbs, routings, prefixes}); err != nil {
			return err
		}
		left = nil
		for _, lb := range lbs.Items {
			left = append(left, "LoadBalancer "+lb.Name)
		}
		for _, routing := range routings.Items {
			left = append(left, "LoadBalancerRouting "+routing.Name)
		}
		for _, prefix := range prefixes.Items {
			if owner := metav1.GetControllerOf(&prefix); owner != nil && owner.Kind == "LoadBalancer" {
				left = append(left, "Prefix "+prefix.Name)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("%d left, e.g. %s", len(left), left[0])
		}
		return nil
	})
	c.result.Leftovers = len(left)
	if err != nil {
		c.problem("%v", err)
	}
}

// chaosReplica is one CCM replica, restarted after each kill or pause.
type chaosReplica struct {
	name  string
	chaos *chaos
	// proxy and targetProxy are its ways to IronCore and the target cluster.
	proxy, targetProxy           *apiproxy.Proxy
	kubeconfig, targetKubeconfig string

	mu      sync.Mutex
	current *testenv.Process
	starts  int
	// planning is set while the run itself ends the process.
	planning bool
}

func (r *chaosReplica) args() []string {
	return append(leaderElection(), "--ironcore-kubeconfig="+r.kubeconfig, "--kubeconfig="+r.targetKubeconfig,
		"--authentication-kubeconfig="+r.targetKubeconfig, "--authorization-kubeconfig="+r.targetKubeconfig, "--v=1",
		"--configure-cloud-routes=true", "--cluster-cidr="+clusterCIDR,
		fmt.Sprintf("--use-nic-selector=%t", r.chaos.opts.Selecting))
}

func (r *chaosReplica) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	process, _, err := r.chaos.stack.StartCCM(r.chaos.binary, fmt.Sprintf("%s-%d", r.name, r.starts), r.args()...)
	if err != nil {
		return err
	}
	r.current, r.planning = process, false
	return nil
}

// describeReplicas says, for a failure, whether each replica runs and how its log ends.
func (c *chaos) describeReplicas() string {
	var b strings.Builder
	for _, r := range c.replicas {
		process := r.process()
		state := "running"
		select {
		case <-process.Exited():
			state = fmt.Sprintf("exited (%v)", process.Err())
		default:
		}
		fmt.Fprintf(&b, "%s is %s; its log ends:\n%s\n", process.Name, state, logTail(process.LogPath, 60))
	}
	return b.String()
}

// logTail returns the last lines of the file at path.
func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func (r *chaosReplica) process() *testenv.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current
}

func (r *chaosReplica) planned(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.planning = on
}

func (r *chaosReplica) kill() {
	r.planned(true)
	r.process().Kill()
}

// refusedRenewal tells a write of the leader lease that the API server refused as a conflict.
func refusedRenewal(write apiproxy.Write) bool {
	return write.Resource == "leases.coordination.k8s.io" && write.Name == chaosLeaseName && write.Status == http.StatusConflict
}

// lastLeaseWrite is when the replica last wrote the leader lease successfully, as its target
// proxy saw it.
func (r *chaosReplica) lastLeaseWrite() time.Time {
	writes := r.targetProxy.Writes()
	for i := len(writes) - 1; i >= 0; i-- {
		w := writes[i]
		if w.Resource == "leases.coordination.k8s.io" && (w.Name == chaosLeaseName || w.Verb == "create") && w.Status >= 200 && w.Status < 300 {
			return w.At
		}
	}
	return time.Time{}
}

func (r *chaosReplica) running() bool {
	select {
	case <-r.process().Exited():
		return false
	default:
		return true
	}
}

// startupLookupFault tells the end of a replica whose start-up, in the framework, could not read
// the cluster's authentication configuration because the target API failed the request on
// purpose.
func startupLookupFault(last string) bool {
	if !strings.Contains(last, "unable to load configmap based") {
		return false
	}
	// The target API's injected faults: a 500, or a reset stream or connection.
	for _, fault := range []string{"injected failure", "INTERNAL_ERROR", "connection reset", "EOF"} {
		if strings.Contains(last, fault) {
			return true
		}
	}
	return false
}

// superviseReplicas restarts a replica that ended by itself (a lost lease, a crash), as a
// Deployment would, and reports it.
func (c *chaos) superviseReplicas(ctx context.Context) {
	eachTick(ctx, time.Second, func() {
		for _, replica := range c.replicas {
			replica.mu.Lock()
			process, planning := replica.current, replica.planning
			replica.mu.Unlock()
			select {
			case <-process.Exited():
			default:
				continue
			}
			if planning {
				continue
			}
			last := logTail(process.LogPath, 3)
			c.mu.Lock()
			c.result.UnplannedExits = append(c.result.UnplannedExits, fmt.Sprintf("%s (%v): %s", process.Name, process.Err(), last))
			c.mu.Unlock()
			// Losing the lease to faults of the target API is a way to end, and so is the
			// framework's start-up failing to read its authentication configuration through a
			// fault of the target API (it exits, to be restarted); any other is not.
			if !strings.Contains(last, "leaderelection lost") && !startupLookupFault(last) {
				c.problem("%s ended by itself: %s", process.Name, last)
			}
			c.log("%s ended by itself (%v); restarting it. Its last lines:\n%s", process.Name, process.Err(), last)
			if err := replica.start(); err != nil {
				c.problem("restart %s: %v", replica.name, err)
			}
		}
	})
}

func (c *chaos) stopReplicas() {
	for _, replica := range c.replicas {
		replica.planned(true)
		if process := replica.process(); process != nil {
			_ = process.Stop()
		}
	}
}
