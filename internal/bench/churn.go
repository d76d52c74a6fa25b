package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// ChurnOptions describe an endpoint churn run: Services with externalTrafficPolicy Local whose
// endpoints move between Nodes in rounds.
type ChurnOptions struct {
	Nodes, Services, Rounds int
	// Latency is how long the simulated IronCore providers take to report each change.
	Latency time.Duration
	// Command is the CCM command line, with placeholders (see DefaultCommand).
	Command string
	Label   string
	// Quiet is how long writes are counted after endpoint changes that move no Node.
	Quiet    time.Duration
	Progress io.Writer
	Alone    bool
}

// endpointsPerService is how many Nodes each Service has an endpoint on.
const endpointsPerService = 3

// ChurnResult is what an endpoint churn run measured.
type ChurnResult struct {
	Label     string    `json:"label"`
	Date      time.Time `json:"date"`
	Machine   Machine   `json:"machine"`
	Command   string    `json:"command"`
	Nodes     int       `json:"nodes"`
	Services  int       `json:"services"`
	Rounds    int       `json:"rounds"`
	Latency   Seconds   `json:"latencySeconds"`
	Endpoints int       `json:"endpointsPerService"`
	// Changes are the EndpointSlice updates that moved an endpoint to another Node;
	// Convergence is, for each, the time until the LoadBalancerRouting held the new Nodes.
	Changes     int     `json:"changes"`
	Convergence Timings `json:"convergence"`
	// RoutingWrites and Writes are the CCM's IronCore writes (to routings, and in all) during
	// those rounds; WritesPerChange divides the latter by Changes.
	RoutingWrites   int     `json:"routingWrites"`
	Writes          int     `json:"writes"`
	WritesPerChange float64 `json:"writesPerChange"`
	// QuietChanges are EndpointSlice updates that moved no endpoint between Nodes, and
	// QuietWrites the CCM's IronCore writes in the QuietSeconds after them.
	QuietChanges       int            `json:"quietChanges"`
	QuietWrites        int            `json:"quietWrites"`
	QuietRoutingWrites int            `json:"quietRoutingWrites"`
	QuietSeconds       Seconds        `json:"quietSeconds"`
	Requests           []RequestCount `json:"requests"`
	QuietRequests      []RequestCount `json:"quietRequests"`
	CCM                Usage          `json:"ccm"`
}

// RunChurn runs the endpoint churn scenario once.
func RunChurn(ctx context.Context, opts ChurnOptions) (*ChurnResult, error) {
	log := func(format string, args ...any) { fmt.Fprintf(opts.Progress, format+"\n", args...) }
	result := &ChurnResult{Label: opts.Label, Date: time.Now().UTC().Truncate(time.Second), Machine: describeMachine(), Command: opts.Command,
		Nodes: opts.Nodes, Services: opts.Services, Rounds: opts.Rounds, Latency: newSeconds(opts.Latency), Endpoints: endpointsPerService,
		QuietSeconds: newSeconds(opts.Quiet)}
	if opts.Nodes < endpointsPerService+1 {
		return nil, fmt.Errorf("the churn needs at least %d Nodes", endpointsPerService+1)
	}
	stack, err := testenv.Start(ctx, testenv.Options{Progress: opts.Progress, SimulatorLatency: opts.Latency, Purpose: purpose(opts.Alone)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = stack.Stop() }()
	log("creating %d Machines...", opts.Nodes)
	if err := createMachines(ctx, stack, opts.Nodes, true); err != nil {
		return nil, err
	}
	ccm, _, err := startCCM(ctx, stack, Options{Command: opts.Command, NodeSyncPeriod: time.Minute, Progress: opts.Progress})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ccm.Stop() }()
	log("registering %d Nodes and waiting for their initialization...", opts.Nodes)
	if err := parallel(opts.Nodes, func(i int) error {
		_, err := stack.CreateNode(ctx, nodeName(i), testenv.NodeOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := waitForInitializedNodes(ctx, stack, opts.Nodes); err != nil {
		return nil, fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	// The cluster labels the CCM puts on the Machines and NetworkInterfaces of new Nodes are
	// writes of their own, not the churn's.
	if err := waitForClusterLabels(ctx, stack, opts.Nodes); err != nil {
		return nil, fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	nicIPs, err := networkInterfaceIPs(ctx, stack)
	if err != nil {
		return nil, err
	}

	churn := &endpointChurn{stack: stack, nodes: opts.Nodes, nicIPs: nicIPs, placement: map[int][]int{}, lbs: map[string]int{}}
	log("creating %d Local Services with endpoints on %d Nodes each...", opts.Services, endpointsPerService)
	services := make([]*corev1.Service, opts.Services)
	if err := parallel(opts.Services, func(j int) error {
		service, err := stack.CreateLoadBalancerService(ctx, serviceName(j), testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
		if err != nil {
			return err
		}
		services[j] = service
		return nil
	}); err != nil {
		return nil, err
	}
	for j, service := range services {
		churn.lbs[lbspec.Name(service)] = j
		churn.placement[j] = []int{(j * 7) % opts.Nodes, (j*7 + 1) % opts.Nodes, (j*7 + 2) % opts.Nodes}
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	if err := churn.watch(watchCtx); err != nil {
		return nil, err
	}
	if err := churn.apply(ctx, services, 0); err != nil {
		return nil, err
	}
	if _, err := churn.wait(ctx); err != nil {
		return nil, fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	log("all routings hold their Services' endpoint Nodes")

	var convergence []time.Duration
	var requests []RequestCount
	for round := 1; round <= opts.Rounds; round++ {
		stack.IronCoreProxy.Reset()
		for j := range services {
			// The first endpoint moves to the next Node that has none of the Service's.
			placement := churn.placement[j]
			next := (placement[len(placement)-1] + 1) % opts.Nodes
			churn.placement[j] = append(placement[1:], next)
		}
		if err := churn.apply(ctx, services, round); err != nil {
			return nil, err
		}
		took, err := churn.wait(ctx)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w (CCM log: %s)", round, err, ccm.LogPath)
		}
		convergence = append(convergence, took...)
		counted := counts(stack.IronCoreProxy.Counts())
		requests = mergeCounts(requests, counted)
		result.RoutingWrites += totalOn(counted, []string{"loadbalancerroutings"}, true)
		result.Writes += total(counted, true)
		result.Changes += len(services)
		slices.Sort(took)
		log("round %d: %d endpoint moves, routings converged (p50 %s, max %s)", round, len(services), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
	slices.Sort(convergence)
	result.Convergence = newTimings(convergence)
	result.Requests = requests
	if result.Changes > 0 {
		result.WritesPerChange = float64(result.Writes) / float64(result.Changes)
	}

	log("changing every Service's endpoints without moving a Node, counting writes for %s...", opts.Quiet)
	stack.IronCoreProxy.Reset()
	if err := churn.apply(ctx, services, opts.Rounds+1); err != nil {
		return nil, err
	}
	result.QuietChanges = len(services)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(opts.Quiet):
	}
	result.QuietRequests = counts(stack.IronCoreProxy.Counts())
	result.QuietWrites = total(result.QuietRequests, true)
	result.QuietRoutingWrites = totalOn(result.QuietRequests, []string{"loadbalancerroutings"}, true)
	if result.CCM, err = processUsage(ccm.Pid()); err != nil {
		return nil, err
	}
	return result, nil
}

// endpointChurn tracks where each Service's endpoints are and when its routing follows.
type endpointChurn struct {
	stack     *testenv.Stack
	nodes     int
	nicIPs    map[string][]string
	placement map[int][]int
	// lbs maps LoadBalancer names to Service indexes.
	lbs map[string]int

	mu      sync.Mutex
	routed  map[int][]string
	changed map[int]time.Time
	matched map[int]time.Duration
	signal  chan struct{}
}

// apply writes every Service's EndpointSlice from its placement; the round number goes into
// the endpoint addresses, so every round changes every slice.
func (c *endpointChurn) apply(ctx context.Context, services []*corev1.Service, round int) error {
	c.mu.Lock()
	c.changed, c.matched, c.signal = map[int]time.Time{}, map[int]time.Duration{}, make(chan struct{}, 1)
	c.mu.Unlock()
	return parallel(len(services), func(j int) error {
		var endpoints []testenv.Endpoint
		for k, node := range c.placement[j] {
			endpoints = append(endpoints, testenv.Endpoint{IP: fmt.Sprintf("10.%d.%d.%d", 64+round%64, j%250, k+1), Node: nodeName(node), Ready: true, Serving: true})
		}
		c.mu.Lock()
		c.changed[j] = time.Now()
		c.mu.Unlock()
		if err := c.stack.SetEndpoints(ctx, services[j], endpoints); err != nil {
			return err
		}
		c.check(j)
		return nil
	})
}

func (c *endpointChurn) expected(j int) []string {
	var ips []string
	for _, node := range c.placement[j] {
		ips = append(ips, c.nicIPs[testenv.NetworkInterfaceName(nodeName(node))]...)
	}
	slices.Sort(ips)
	return ips
}

// check records when Service j's routing first holds its expected Nodes after its change.
func (c *endpointChurn) check(j int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed, ok := c.changed[j]
	if _, done := c.matched[j]; !ok || done || !slices.Equal(c.routed[j], c.expected(j)) {
		return
	}
	c.matched[j] = time.Since(changed)
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// watch follows every LoadBalancerRouting from a watch that sees each change.
func (c *endpointChurn) watch(ctx context.Context) error {
	clientset, err := ironcoreclientset.NewForConfig(c.stack.IronCore.Config)
	if err != nil {
		return err
	}
	routings := clientset.NetworkingV1alpha1().LoadBalancerRoutings(c.stack.Namespace)
	c.routed = map[int][]string{}
	_, err = testenv.ListAndWatch(ctx, routings.List, routings.Watch, nil, func(event watch.Event) {
		routing, isRouting := event.Object.(*networkingv1alpha1.LoadBalancerRouting)
		if !isRouting || event.Type == watch.Deleted {
			return
		}
		j, tracked := c.lbs[routing.Name]
		if !tracked {
			return
		}
		ips := testenv.DestinationIPs(routing)
		c.mu.Lock()
		c.routed[j] = ips
		c.mu.Unlock()
		c.check(j)
	})
	return err
}

// wait returns, once every Service's routing holds its expected Nodes, how long each took.
func (c *endpointChurn) wait(ctx context.Context) ([]time.Duration, error) {
	deadline := time.After(10 * time.Minute)
	for {
		c.mu.Lock()
		done := len(c.matched) == len(c.placement)
		signal := c.signal
		took := make([]time.Duration, 0, len(c.matched))
		for _, d := range c.matched {
			took = append(took, d)
		}
		c.mu.Unlock()
		if done {
			return took, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			return nil, fmt.Errorf("%d of %d routings followed their endpoints within 10 minutes", len(took), len(c.placement))
		case <-signal:
		}
	}
}

func waitForInitializedNodes(ctx context.Context, stack *testenv.Stack, n int) error {
	return testenv.WaitFor(ctx, 10*time.Minute, fmt.Sprintf("%d Nodes to be initialized", n), func(ctx context.Context) error {
		nodes, err := stack.TargetClientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		initialized := 0
		for _, node := range nodes.Items {
			if node.Spec.ProviderID != "" {
				initialized++
			}
		}
		if initialized < n {
			return fmt.Errorf("%d initialized", initialized)
		}
		return nil
	})
}

func waitForClusterLabels(ctx context.Context, stack *testenv.Stack, n int) error {
	return testenv.WaitFor(ctx, 10*time.Minute, fmt.Sprintf("the cluster label on %d Machines and NetworkInterfaces", n), func(ctx context.Context) error {
		machines := &computev1alpha1.MachineList{}
		nics := &networkingv1alpha1.NetworkInterfaceList{}
		if err := stack.ListIronCore(ctx, []client.ObjectList{machines, nics}, client.HasLabels{keys.LabelCluster}); err != nil {
			return err
		}
		if min(len(machines.Items), len(nics.Items)) < n {
			return fmt.Errorf("%d Machines and %d NetworkInterfaces labelled", len(machines.Items), len(nics.Items))
		}
		return nil
	})
}

func networkInterfaceIPs(ctx context.Context, stack *testenv.Stack) (map[string][]string, error) {
	nics := &networkingv1alpha1.NetworkInterfaceList{}
	if err := stack.IronCore.Client.List(ctx, nics, client.InNamespace(stack.Namespace)); err != nil {
		return nil, err
	}
	ips := map[string][]string{}
	for _, nic := range nics.Items {
		for _, ip := range nic.Status.IPs {
			ips[nic.Name] = append(ips[nic.Name], ip.String())
		}
	}
	return ips, nil
}

func mergeCounts(into, more []RequestCount) []RequestCount {
	for _, count := range more {
		i := slices.IndexFunc(into, func(c RequestCount) bool { return c.Verb == count.Verb && c.Resource == count.Resource })
		if i < 0 {
			into = append(into, count)
			continue
		}
		into[i].Count += count.Count
	}
	sort.Slice(into, func(a, b int) bool {
		return into[a].Resource < into[b].Resource || (into[a].Resource == into[b].Resource && into[a].Verb < into[b].Verb)
	})
	return into
}

// Name is the base name of the run's files.
func (r *ChurnResult) Name() string {
	return fmt.Sprintf("endpoint-churn-%s-n%d-s%d", r.Label, r.Nodes, r.Services)
}

// Write stores the result in dir as <name>.json and <name>.md.
func (r *ChurnResult) Write(dir string) ([]string, error) {
	return writeResult(dir, r.Name(), r, r.Markdown(), nil)
}

// Markdown renders the result as tables.
func (r *ChurnResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: endpoint churn, %d Local Services on %d Nodes\n\n", r.Label, r.Services, r.Nodes)
	fmt.Fprintf(&b, "Run %s on %d CPUs (%s), %d GiB, kernel %s, %s. Simulated IronCore latency %gs per change.\n\n",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.Kernel, r.Machine.Go, r.Latency)
	fmt.Fprintf(&b, "CCM command: `%s`\n\n", r.Command)
	fmt.Fprintf(&b, "Each Service (`externalTrafficPolicy: Local`) has one ready endpoint on each of %d Nodes. In each of %d rounds, every "+
		"Service's EndpointSlice is rewritten with one endpoint moved to another Node, all Services at once.\n\n", r.Endpoints, r.Rounds)
	fmt.Fprintf(&b, "| | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| endpoint moves | %d |\n", r.Changes)
	fmt.Fprintf(&b, "| from the EndpointSlice update to the routing holding the new Nodes: p50 | %.3fs |\n", r.Convergence.P50)
	fmt.Fprintf(&b, "| p95 | %.3fs |\n| max | %.3fs |\n", r.Convergence.P95, r.Convergence.Max)
	fmt.Fprintf(&b, "| IronCore writes during the rounds | %d (%d to LoadBalancerRoutings) |\n", r.Writes, r.RoutingWrites)
	fmt.Fprintf(&b, "| IronCore writes per endpoint move | %.2f |\n", r.WritesPerChange)
	fmt.Fprintf(&b, "| EndpointSlice updates that moved no Node | %d |\n", r.QuietChanges)
	fmt.Fprintf(&b, "| IronCore writes in the %gs after them | %d (%d to LoadBalancerRoutings) |\n", r.QuietSeconds, r.QuietWrites, r.QuietRoutingWrites)
	fmt.Fprintf(&b, "| CCM peak memory | %.0f MiB |\n| CCM CPU time | %.1fs |\n\n", r.CCM.PeakRSSMiB, r.CCM.CPUSeconds)
	fmt.Fprintf(&b, "IronCore requests during the rounds:\n\n| verb | resource | count |\n|---|---|---:|\n")
	for _, count := range r.Requests {
		fmt.Fprintf(&b, "| %s | %s | %d |\n", count.Verb, count.Resource, count.Count)
	}
	fmt.Fprintf(&b, "\nIronCore requests in the %gs after the updates that moved no Node:\n\n| verb | resource | count |\n|---|---|---:|\n", r.QuietSeconds)
	for _, count := range r.QuietRequests {
		fmt.Fprintf(&b, "| %s | %s | %d |\n", count.Verb, count.Resource, count.Count)
	}
	return b.String()
}
