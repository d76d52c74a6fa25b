package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// IPAMOptions describe a pod CIDR allocation run: Nodes joining at once, their dual-stack pod
// CIDRs allocated by IronCore's IPAM.
type IPAMOptions struct {
	Nodes int
	// Latency is how long the simulated IronCore providers take to report each change.
	Latency time.Duration
	// Command is the CCM command line, with placeholders (see DefaultCommand).
	Command  string
	Label    string
	Progress io.Writer
	Alone    bool
}

// The parents the run's pod CIDRs come from, and the cluster CIDR that covers them.
const (
	ipamParentV4, ipamParentV4CIDR = "pods-v4", "10.128.0.0/9"
	ipamParentV6, ipamParentV6CIDR = "pods-v6", "fd00:128::/48"
	ipamClusterCIDR                = ipamParentV4CIDR + "," + ipamParentV6CIDR
)

// IPAMResult is what a pod CIDR allocation run measured.
type IPAMResult struct {
	Label   string    `json:"label"`
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	Command string    `json:"command"`
	Nodes   int       `json:"nodes"`
	Latency Seconds   `json:"latencySeconds"`
	// Allocation is, per Node, the time from its creation to spec.podCIDRs set (both
	// families); NetworkAvailable to its NetworkUnavailable condition cleared by the route
	// controller.
	Allocation       Timings `json:"allocation"`
	NetworkAvailable Timings `json:"networkAvailable"`
	// PrefixAllocation is IronCore's share: for each pod CIDR Prefix, from its creation (by
	// IronCore, for the entry the CCM added) to its phase Allocated, to the second.
	PrefixAllocation Timings `json:"prefixAllocation"`
	// Converged is the time from the first Node's creation to the last Node's pod CIDRs.
	Converged Seconds `json:"convergedSeconds"`
	// Overlaps counts pairs of overlapping pod CIDRs; Misplaced counts Nodes whose pod CIDRs
	// are not one IPv4 and one IPv6 CIDR from the parents, IPv4 first.
	Overlaps  int `json:"overlaps"`
	Misplaced int `json:"misplaced"`
	// Writes are the CCM's IronCore writes during the burst; WritesPerNode divides them by
	// Nodes.
	Writes        int            `json:"writes"`
	WritesPerNode float64        `json:"writesPerNode"`
	Requests      []RequestCount `json:"requests"`
	CCM           Usage          `json:"ccm"`
}

// RunIPAM runs the pod CIDR allocation scenario once.
func RunIPAM(ctx context.Context, opts IPAMOptions) (*IPAMResult, error) {
	log := func(format string, args ...any) { fmt.Fprintf(opts.Progress, format+"\n", args...) }
	result := &IPAMResult{Label: opts.Label, Date: time.Now().UTC().Truncate(time.Second), Machine: describeMachine(), Command: opts.Command,
		Nodes: opts.Nodes, Latency: newSeconds(opts.Latency)}
	stack, err := testenv.Start(ctx, testenv.Options{Progress: opts.Progress, SimulatorLatency: opts.Latency, Purpose: purpose(opts.Alone)})
	if err != nil {
		return nil, err
	}
	defer func() { _ = stack.Stop() }()
	for name, cidr := range map[string]string{ipamParentV4: ipamParentV4CIDR, ipamParentV6: ipamParentV6CIDR} {
		if _, err := stack.CreateRootPrefix(ctx, name, cidr, nil); err != nil {
			return nil, err
		}
	}
	if stack.CloudConfig, err = stack.WriteCloudConfig("ipam", "podCIDRParentPrefix: "+ipamParentV4+"\nipv6PodCIDRParentPrefix: "+ipamParentV6+"\n"); err != nil {
		return nil, err
	}
	log("creating %d Machines...", opts.Nodes)
	if err := createMachines(ctx, stack, opts.Nodes, true); err != nil {
		return nil, err
	}
	watch := newPodCIDRWatch(opts.Nodes)
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	if _, err := factory.Core().V1().Nodes().Informer().AddEventHandler(onAddOrUpdate(watch.nodeChanged)); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	ccm, _, err := startCCM(ctx, stack, Options{Command: opts.Command, ClusterCIDR: ipamClusterCIDR, NodeSyncPeriod: time.Minute, Progress: opts.Progress})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ccm.Stop() }()

	log("registering %d Nodes at once and waiting for their pod CIDRs...", opts.Nodes)
	stack.IronCoreProxy.Reset()
	started := time.Now()
	if err := parallel(opts.Nodes, func(i int) error {
		watch.created(nodeName(i))
		_, err := stack.CreateNode(ctx, nodeName(i), testenv.NodeOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := watch.wait(ctx, 10*time.Minute, opts.Progress); err != nil {
		return nil, fmt.Errorf("%w (CCM log: %s)", err, ccm.LogPath)
	}
	result.Converged = newSeconds(watch.lastAllocation().Sub(started))
	result.Requests = counts(stack.IronCoreProxy.Counts())
	result.Writes = total(result.Requests, true)
	result.WritesPerNode = perObject(result.Writes, opts.Nodes)
	watch.fill(result)
	if result.PrefixAllocation, err = prefixAllocationTimes(ctx, stack); err != nil {
		return nil, err
	}
	if result.CCM, err = processUsage(ccm.Pid()); err != nil {
		return nil, err
	}
	log("all %d Nodes have their pod CIDRs and their networks available; converged after %.1fs, allocation p50 %.2fs, max %.2fs",
		opts.Nodes, float64(result.Converged), float64(result.Allocation.P50), float64(result.Allocation.Max))
	return result, nil
}

// prefixAllocationTimes are IronCore's times from creating each pod CIDR Prefix to its
// allocation, as the Prefixes record them (to the second).
func prefixAllocationTimes(ctx context.Context, stack *testenv.Stack) (Timings, error) {
	prefixes := &ipamv1alpha1.PrefixList{}
	if err := stack.IronCore.Client.List(ctx, prefixes, client.InNamespace(stack.Namespace), client.HasLabels{keys.LabelPodCIDR}); err != nil {
		return Timings{}, fmt.Errorf("list the pod CIDR Prefixes: %w", err)
	}
	var durations []time.Duration
	for _, prefix := range prefixes.Items {
		if prefix.Status.Phase == ipamv1alpha1.PrefixPhaseAllocated && prefix.Status.LastPhaseTransitionTime != nil {
			durations = append(durations, prefix.Status.LastPhaseTransitionTime.Sub(prefix.CreationTimestamp.Time))
		}
	}
	slices.Sort(durations)
	return newTimings(durations), nil
}

// podCIDRWatch times the Nodes' pod CIDRs and network availability from a Node watch.
type podCIDRWatch struct {
	nodes  int
	signal chan struct{}

	mu                              sync.Mutex
	createdAt, allocatedAt, availAt map[string]time.Time
	podCIDRs                        map[string][]string
}

func newPodCIDRWatch(nodes int) *podCIDRWatch {
	return &podCIDRWatch{nodes: nodes, signal: make(chan struct{}, 1), createdAt: map[string]time.Time{},
		allocatedAt: map[string]time.Time{}, availAt: map[string]time.Time{}, podCIDRs: map[string][]string{}}
}

func (w *podCIDRWatch) created(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.createdAt[name] = time.Now()
}

func (w *podCIDRWatch) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.allocatedAt[node.Name]; !seen && len(node.Spec.PodCIDRs) > 0 {
		w.allocatedAt[node.Name] = now
		w.podCIDRs[node.Name] = node.Spec.PodCIDRs
	}
	if _, seen := w.availAt[node.Name]; !seen && slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeNetworkUnavailable && c.Status == corev1.ConditionFalse
	}) {
		w.availAt[node.Name] = now
	}
	if len(w.allocatedAt) >= w.nodes && len(w.availAt) >= w.nodes {
		select {
		case w.signal <- struct{}{}:
		default:
		}
	}
}

func (w *podCIDRWatch) wait(ctx context.Context, timeout time.Duration, out io.Writer) error {
	deadline := time.After(timeout)
	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-w.signal:
			return nil
		case <-ticker.C:
			w.mu.Lock()
			fmt.Fprintf(out, "  pod CIDRs %d/%d, networks available %d/%d\n", len(w.allocatedAt), w.nodes, len(w.availAt), w.nodes)
			w.mu.Unlock()
		case <-deadline:
			return fmt.Errorf("not every Node got pod CIDRs and its network within %s", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (w *podCIDRWatch) lastAllocation() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, at := range w.allocatedAt {
		if at.After(last) {
			last = at
		}
	}
	return last
}

// fill writes the timings and the checks of the pod CIDRs into the result.
func (w *podCIDRWatch) fill(result *IPAMResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since := func(at map[string]time.Time) []time.Duration {
		var durations []time.Duration
		for name, t := range at {
			durations = append(durations, t.Sub(w.createdAt[name]))
		}
		slices.Sort(durations)
		return durations
	}
	result.Allocation = newTimings(since(w.allocatedAt))
	result.NetworkAvailable = newTimings(since(w.availAt))
	v4, v6 := netip.MustParsePrefix(ipamParentV4CIDR), netip.MustParsePrefix(ipamParentV6CIDR)
	var all []netip.Prefix
	for _, cidrs := range w.podCIDRs {
		if len(cidrs) != 2 {
			result.Misplaced++
			continue
		}
		first, err1 := netip.ParsePrefix(cidrs[0])
		second, err2 := netip.ParsePrefix(cidrs[1])
		if err1 != nil || err2 != nil || !v4.Overlaps(first) || !v6.Overlaps(second) {
			result.Misplaced++
			continue
		}
		all = append(all, first, second)
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[i].Overlaps(all[j]) {
				result.Overlaps++
			}
		}
	}
}

// Name is the base name of the run's files.
func (r *IPAMResult) Name() string {
	return fmt.Sprintf("ipam-%s-n%d", r.Label, r.Nodes)
}

// Write stores the result in dir as <name>.json and <name>.md.
func (r *IPAMResult) Write(dir string) ([]string, error) {
	return writeResult(dir, r.Name(), r, r.Markdown(), nil)
}

// Markdown renders the result as tables.
func (r *IPAMResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: dual-stack pod CIDRs from IronCore's IPAM for %d Nodes joining at once\n\n", r.Label, r.Nodes)
	fmt.Fprintf(&b, "Run %s on %d CPUs (%s), %d GiB, kernel %s, %s. Simulated IronCore latency %gs per change.\n\n",
		r.Date.Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.Kernel, r.Machine.Go, r.Latency)
	fmt.Fprintf(&b, "CCM command: `%s`, with pod CIDRs from the parents %s (/24 each) and %s (/64 each), and routes on for both.\n\n",
		r.Command, ipamParentV4CIDR, ipamParentV6CIDR)
	fmt.Fprintf(&b, "| | p50 | p95 | max |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| Node creation to `spec.podCIDRs` (both families) | %.2fs | %.2fs | %.2fs |\n", r.Allocation.P50, r.Allocation.P95, r.Allocation.Max)
	fmt.Fprintf(&b, "| Node creation to `NetworkUnavailable` cleared | %.2fs | %.2fs | %.2fs |\n", r.NetworkAvailable.P50, r.NetworkAvailable.P95, r.NetworkAvailable.Max)
	fmt.Fprintf(&b, "| IronCore's share: pod CIDR Prefix created to Allocated (%d Prefixes, to the second) | %.0fs | %.0fs | %.0fs |\n\n",
		r.PrefixAllocation.Count, r.PrefixAllocation.P50, r.PrefixAllocation.P95, r.PrefixAllocation.Max)
	fmt.Fprintf(&b, "| | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| first Node created to last Node's pod CIDRs | %.1fs |\n", r.Converged)
	fmt.Fprintf(&b, "| overlapping pod CIDRs | %d |\n| Nodes without one IPv4 and one IPv6 CIDR from the parents | %d |\n", r.Overlaps, r.Misplaced)
	fmt.Fprintf(&b, "| IronCore writes by the CCM | %d (%.2f per Node) |\n", r.Writes, r.WritesPerNode)
	fmt.Fprintf(&b, "| CCM peak memory | %.0f MiB |\n| CCM CPU time | %.1fs |\n\n", r.CCM.PeakRSSMiB, r.CCM.CPUSeconds)
	fmt.Fprintf(&b, "IronCore requests by the CCM during the burst:\n\n| verb | resource | count |\n|---|---|---:|\n")
	for _, count := range r.Requests {
		fmt.Fprintf(&b, "| %s | %s | %d |\n", count.Verb, count.Resource, count.Count)
	}
	return b.String()
}
