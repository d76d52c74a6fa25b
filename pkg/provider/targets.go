package provider

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// targets finds the NetworkInterfaces that load balancers send traffic to: those on the
// cluster Network of the Nodes the service controller passes.
type targets struct {
	ironcore *ironcore.Client
	cluster  string
	network  string
	// nodes is the CCM's Node lister, set once informers exist. Every Service's sync passes a
	// Node list, but a list may be older than another's, so the lister, which is at least as
	// new as any list, decides which Nodes are eligible.
	nodes corelisters.NodeLister
	// endpointSlices is the CCM's EndpointSlice lister, set once informers exist: Local
	// Services go only to Nodes with a serving endpoint.
	endpointSlices       discoverylisters.EndpointSliceLister
	endpointSlicesSynced func() bool
	// recheck, if set, has a Service's targets synced again shortly (see recheckSoon). It is
	// set when the controller that does it starts, while syncs may already run.
	recheck atomic.Pointer[func(*corev1.Service)]
	// health is the Node health rule.
	health targetrules.Health
	// background is the context of label syncs that outlive the call that asked for them.
	background context.Context

	// labelsMu guards the fields below. The target label is the same for all load balancers,
	// so one label sync runs at a time; syncs that arrive meanwhile add their Nodes to
	// pendingNodes (a union: a later call may carry an older list) for the running sync's
	// next pass, whose outcome pendingPass carries to the callers that wait for it.
	labelsMu         sync.Mutex
	labelSyncRunning bool
	pendingNodes     map[string]*corev1.Node
	pendingPass      *labelPassOutcome
	// lastReport is what the last pass found, for the callers that do not wait for a pass:
	// every Service's sync passes the same Nodes, and finding each one's Machine and
	// NetworkInterfaces again per Service costs O(Nodes) per sync.
	lastReport targetReport
	// retryNodes are the Nodes of passes whose writes failed, for the retry that waits if
	// retryScheduled; retryDelay is its backoff.
	retryNodes     map[string]*corev1.Node
	retryScheduled bool
	retryDelay     time.Duration
	// nudgeScheduled is set while a nudge of the selecting LoadBalancers is scheduled or
	// running, and nudgeDue when the targets changed since it began.
	nudgeScheduled, nudgeDue bool

	// leftOut remembers the Nodes already logged as not IronCore Machines of this cluster, so
	// that each is logged once, not on every sync of every Service.
	leftOut sync.Map
}

// Backoff of label syncs retried after a failed write.
const (
	firstLabelRetryDelay = time.Second
	maxLabelRetryDelay   = time.Minute
)

// labelPassOutcome is closed once a pass of the label sync has written what it had to; report
// and err are its outcome, set before done is closed.
type labelPassOutcome struct {
	done   chan struct{}
	report targetReport
	err    error
}

// targetReport is what a target sync found: the Nodes that could not be made targets, and
// what the target rules chose among the others.
type targetReport struct {
	skipped skippedNodes
	choice  targetrules.Choice
}

// skippedNodes lists Nodes that could not be made targets, and why.
type skippedNodes []string

func (s skippedNodes) err() error {
	if len(s) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", targetrules.ErrNodesSkipped, strings.Join(s, "; "))
}

// resolvedNode is a Node with its Machine and its NetworkInterfaces on the cluster Network.
type resolvedNode struct {
	node    *corev1.Node
	machine *computev1alpha1.Machine
	nics    []networkingv1alpha1.NetworkInterface
}

// resolve finds the Nodes' Machines and NetworkInterfaces on the cluster Network, from the
// cache. A Node that is not initialized yet (no provider ID) is found as its initialization
// will find it, by its name, as Machine name or guest hostname: the service controller passes
// it as a target, and its labels are then due with its route, in one write. If the cache knows
// no such Machine, it is passed over quietly and becomes a target when the framework passes it
// again with its provider ID. So is a Node that is not an IronCore Machine of this namespace,
// or whose Machine is gone (the node lifecycle controller deletes it): they can never be
// targets, and failing every Service's sync over them would help no one.
func (t *targets) resolve(ctx context.Context, nodes []*corev1.Node, needIPs bool) ([]resolvedNode, skippedNodes, error) {
	var resolved []resolvedNode
	var skipped skippedNodes
	for _, node := range nodes {
		var (
			machine  *computev1alpha1.Machine
			nodeNICs []networkingv1alpha1.NetworkInterface
			reason   string
			quiet    bool
			err      error
		)
		if node.Spec.ProviderID == "" {
			var lookupErr error
			machine, lookupErr = machines{ironcore: t.ironcore}.cachedForUninitializedNode(ctx, node)
			if errors.Is(lookupErr, ironcore.ErrNotFound) || errors.Is(lookupErr, ironcore.ErrAmbiguousHostname) {
				klog.V(4).InfoS("Node has no provider ID yet and no Machine of its name, not a load balancer target yet", "node", klog.KObj(node))
				continue
			}
			if lookupErr != nil {
				return nil, nil, lookupErr
			}
			nodeNICs, reason, err = t.machineNetworkInterfaces(ctx, machine, needIPs)
		} else {
			machine, nodeNICs, reason, quiet, err = t.nodeNetworkInterfaces(ctx, node, needIPs)
		}
		switch {
		case err != nil:
			return nil, nil, err
		case quiet:
			t.logLeftOut(node, reason)
		case reason != "":
			skipped = append(skipped, fmt.Sprintf("Node %s: %s", node.Name, reason))
		default:
			resolved = append(resolved, resolvedNode{node: node, machine: machine, nics: nodeNICs})
		}
	}
	return resolved, skipped, nil
}

// networkInterfacesOf lists the resolved Nodes' NetworkInterfaces, sorted by name.
func networkInterfacesOf(resolved []resolvedNode) []networkingv1alpha1.NetworkInterface {
	var nics []networkingv1alpha1.NetworkInterface
	for _, r := range resolved {
		nics = append(nics, r.nics...)
	}
	slices.SortFunc(nics, func(a, b networkingv1alpha1.NetworkInterface) int { return cmp.Compare(a.Name, b.Name) })
	return nics
}

// recheckSoon has the Service's targets synced again shortly, if a controller offers to.
func (t *targets) recheckSoon(service *corev1.Service) {
	if recheck := t.recheck.Load(); recheck != nil {
		(*recheck)(service)
	}
}

// logLeftOut logs once per Node and reason that the Node is not a load balancer target.
func (t *targets) logLeftOut(node *corev1.Node, reason string) {
	if previous, loaded := t.leftOut.Swap(node.Name, reason); loaded && previous == reason {
		return
	}
	klog.InfoS("Node is not a load balancer target", "node", klog.KObj(node), "reason", reason)
}

// nodeNetworkInterfaces returns one Node's NetworkInterfaces on the cluster Network, or the
// reason it has none that can be used; quiet reasons are facts about the Node that no retry
// changes. Errors are failures to read, not facts about the Node.
func (t *targets) nodeNetworkInterfaces(ctx context.Context, node *corev1.Node, needIPs bool) (machine *computev1alpha1.Machine, nics []networkingv1alpha1.NetworkInterface, reason string, quiet bool, err error) {
	id, parseErr := providerid.Parse(node.Spec.ProviderID)
	if parseErr != nil {
		// A provider ID of another cloud is a fact about the Node, not a failure to report.
		return nil, nil, parseErr.Error(), true, nil //nolint:nilerr
	}
	if id.Namespace != t.ironcore.Namespace() {
		return nil, nil, fmt.Sprintf("provider ID %s is not in IronCore namespace %s", node.Spec.ProviderID, t.ironcore.Namespace()), true, nil
	}
	machine, err = t.ironcore.Machine(ctx, id.Machine)
	if errors.Is(err, ironcore.ErrNotFound) {
		// The cache may lag a Machine the Node was just initialized from: only the API server
		// says it is gone, the one case that no retry changes.
		machine, err = t.ironcore.LiveMachine(ctx, id.Machine)
		if errors.Is(err, ironcore.ErrNotFound) {
			return nil, nil, "its Machine does not exist", true, nil
		}
	}
	if err != nil {
		return nil, nil, "", false, err
	}
	nics, reason, err = t.machineNetworkInterfaces(ctx, machine, needIPs)
	return machine, nics, reason, false, err
}

// machineNetworkInterfaces returns the Machine's NetworkInterfaces on the cluster Network, or
// the reason it has none that can be used.
func (t *targets) machineNetworkInterfaces(ctx context.Context, machine *computev1alpha1.Machine, needIPs bool) ([]networkingv1alpha1.NetworkInterface, string, error) {
	var nics []networkingv1alpha1.NetworkInterface
	for _, name := range computev1alpha1.MachineNetworkInterfaceNames(machine) {
		nic, err := t.ironcore.NetworkInterface(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if nic.Spec.NetworkRef.Name != t.network {
			continue
		}
		if cluster := nic.Labels[keys.LabelCluster]; cluster != "" && cluster != t.cluster {
			return nil, fmt.Sprintf("NetworkInterface %s belongs to cluster %q", nic.Name, cluster), nil
		}
		if needIPs && len(nic.Status.IPs) == 0 {
			return nil, fmt.Sprintf("NetworkInterface %s has no IPs yet", nic.Name), nil
		}
		nics = append(nics, *nic)
	}
	if len(nics) == 0 {
		return nil, fmt.Sprintf("Machine %s has no NetworkInterface on Network %s", machine.Name, t.network), nil
	}
	return nics, "", nil
}

// syncLabels labels the NetworkInterfaces of the eligible Nodes as targets of this cluster's
// load balancers, and unlabels this cluster's other targets, writing only what changes. Load
// balancers select their targets by this label, so Nodes the framework leaves out stop
// receiving traffic.
//
// If another sync is running, it applies these Nodes in its next pass, which this call waits
// for. A pass whose writes fail is retried with a backoff, whether or not its caller is still
// waiting.
func (t *targets) syncLabels(ctx context.Context, nodes []*corev1.Node) (targetReport, error) {
	report, _, err := t.runLabelSync(ctx, nodes)
	return report, err
}

// runLabelSync is syncLabels that also reports whether this call ran the sync, rather than
// leaving its Nodes to one that was running.
func (t *targets) runLabelSync(ctx context.Context, nodes []*corev1.Node) (targetReport, bool, error) {
	if pass := t.claimLabelSync(nodes); pass != nil {
		select {
		case <-pass.done:
			return pass.report, false, pass.err
		case <-ctx.Done():
			return targetReport{}, false, ctx.Err()
		}
	}
	report, err := t.labelPass(ctx, nodes)
	t.handOffLabelSync(ctx)
	return report, true, err
}

// requestLabels is syncLabels for a caller that does not wait for the writes: a new
// LoadBalancer's address does not depend on them, and while Nodes join they queue with the
// Nodes' other writes. It reports what the last pass found; failed writes are retried as any
// sync's are.
func (t *targets) requestLabels(ctx context.Context, nodes []*corev1.Node) targetReport {
	if t.claimLabelSync(nodes) == nil {
		background := t.backgroundContext(context.WithoutCancel(ctx))
		go func() {
			if _, err := t.labelPass(background, nodes); err != nil {
				klog.ErrorS(err, "Could not update load balancer targets; retrying")
			}
			t.handOffLabelSync(background)
		}()
	}
	t.labelsMu.Lock()
	defer t.labelsMu.Unlock()
	return t.lastReport
}

// claimLabelSync makes the caller the one running sync and returns nil, or hands the Nodes to
// the sync that is running and returns the outcome of the pass that will apply them.
func (t *targets) claimLabelSync(nodes []*corev1.Node) *labelPassOutcome {
	t.labelsMu.Lock()
	defer t.labelsMu.Unlock()
	if !t.labelSyncRunning {
		t.labelSyncRunning = true
		return nil
	}
	t.pendingNodes = mergeNodes(t.pendingNodes, nodes)
	if t.pendingPass == nil {
		t.pendingPass = &labelPassOutcome{done: make(chan struct{})}
	}
	return t.pendingPass
}

// labelPass writes the labels of one Node list and schedules a retry if a write fails. The
// service controller retries the caller's Service too, but with its own backoff and only for
// that Service; the labels are every Service's targets.
func (t *targets) labelPass(ctx context.Context, nodes []*corev1.Node) (targetReport, error) {
	report, err := t.writeLabels(ctx, nodes)
	if err != nil {
		t.retryLabels(nodes)
		return report, err
	}
	t.labelsMu.Lock()
	t.lastReport = report
	t.labelsMu.Unlock()
	return report, nil
}

// handOffLabelSync ends the running sync, or, if Nodes were handed to it meanwhile, applies
// them in the background for the callers that wait for them: the caller that ran the sync
// does not wait for other callers' Nodes.
func (t *targets) handOffLabelSync(ctx context.Context) {
	t.labelsMu.Lock()
	defer t.labelsMu.Unlock()
	if t.pendingPass == nil {
		t.labelSyncRunning = false
		return
	}
	go t.drainPendingLabels(t.backgroundContext(context.WithoutCancel(ctx)))
}

// drainPendingLabels applies the Nodes handed to the running sync until none are left, then
// ends it.
func (t *targets) drainPendingLabels(ctx context.Context) {
	for {
		t.labelsMu.Lock()
		if t.pendingPass == nil {
			t.labelSyncRunning = false
			t.labelsMu.Unlock()
			return
		}
		pending, pass := slices.Collect(maps.Values(t.pendingNodes)), t.pendingPass
		t.pendingNodes, t.pendingPass = nil, nil
		t.labelsMu.Unlock()
		report, err := t.labelPass(ctx, pending)
		if err != nil {
			klog.ErrorS(err, "Could not update load balancer targets for a later Node list; retrying")
		}
		pass.report, pass.err = report, err
		close(pass.done)
	}
}

// retryLabels schedules a label sync of the Nodes after a backoff that doubles while retries
// fail. Nodes of failed passes gather in retryNodes, which only the retry reads, so a failing
// pass never feeds the loop of a running one.
func (t *targets) retryLabels(nodes []*corev1.Node) {
	t.labelsMu.Lock()
	defer t.labelsMu.Unlock()
	t.retryNodes = mergeNodes(t.retryNodes, nodes)
	if t.retryScheduled || t.backgroundContext(context.Background()).Err() != nil {
		return
	}
	t.retryScheduled = true
	t.retryDelay = min(max(2*t.retryDelay, firstLabelRetryDelay), maxLabelRetryDelay)
	time.AfterFunc(t.retryDelay, t.retry)
}

func (t *targets) retry() {
	ctx := t.backgroundContext(context.Background())
	t.labelsMu.Lock()
	nodes := slices.Collect(maps.Values(t.retryNodes))
	t.retryNodes, t.retryScheduled = nil, false
	t.labelsMu.Unlock()
	if ctx.Err() != nil {
		return // no longer leading, or stopped
	}
	// A failure schedules the next retry from within runLabelSync; Nodes handed to a running
	// sync are its to retry.
	_, ran, err := t.runLabelSync(ctx, nodes)
	if err != nil {
		klog.ErrorS(err, "Could not update load balancer targets on retry; retrying again")
	}
	if ran && err == nil {
		t.labelsMu.Lock()
		if !t.retryScheduled {
			t.retryDelay = 0
		}
		t.labelsMu.Unlock()
	}
}

func (t *targets) backgroundContext(fallback context.Context) context.Context {
	if t.background != nil {
		return t.background
	}
	return fallback
}

// mergeNodes adds nodes to set, by name.
func mergeNodes(set map[string]*corev1.Node, nodes []*corev1.Node) map[string]*corev1.Node {
	if set == nil {
		set = make(map[string]*corev1.Node, len(nodes))
	}
	for _, node := range nodes {
		set[node.Name] = node
	}
	return set
}

// writeLabels makes the labels of the NetworkInterfaces match the Nodes the target rules
// choose (see candidates and choose). The writes are asked for all at once: each joins
// whatever else is due for its NetworkInterface (a new Node's route, say) in one patch, and
// the client's rate limiter, not a round trip per NetworkInterface, sets the pace.
func (t *targets) writeLabels(ctx context.Context, nodes []*corev1.Node) (targetReport, error) {
	nodes, err := t.candidates(nodes)
	if err != nil {
		return targetReport{}, err
	}
	resolved, skipped, err := t.resolve(ctx, nodes, false)
	if err != nil {
		return targetReport{}, err
	}
	chosen, choice, err := t.choose(ctx, nil, resolved)
	if err != nil {
		return targetReport{}, err
	}
	nics := networkInterfacesOf(chosen)
	keep := t.keptMachines(nodes, resolved, chosen)
	var (
		writes sync.WaitGroup
		mu     sync.Mutex
		errs   []error
	)
	write := func(nic *networkingv1alpha1.NetworkInterface, label bool) {
		writes.Add(1)
		go func() {
			defer writes.Done()
			var err error
			if label {
				err = t.label(ctx, nic.Name)
			} else {
				err = t.ironcore.RemoveLabel(ctx, nic, keys.LabelLoadBalancerTarget)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			if label {
				klog.V(2).InfoS("NetworkInterface is now a load balancer target", "networkInterface", klog.KObj(nic))
			} else {
				klog.V(2).InfoS("NetworkInterface is no longer a load balancer target", "networkInterface", klog.KObj(nic))
			}
		}()
	}
	wanted := map[string]bool{}
	for i := range nics {
		nic := &nics[i]
		wanted[nic.Name] = true
		if nic.Labels[keys.LabelLoadBalancerTarget] != t.cluster {
			write(nic, true)
		}
	}
	labelled, err := t.ironcore.NetworkInterfacesLabelled(ctx, keys.LabelLoadBalancerTarget, t.cluster)
	if err != nil {
		writes.Wait()
		return targetReport{}, err
	}
	for i := range labelled {
		nic := &labelled[i]
		if wanted[nic.Name] {
			continue
		}
		if nic.Spec.MachineRef != nil && keep[nic.Spec.MachineRef.Name] {
			// Its Node is eligible but could not be resolved this time (a cache behind by a
			// moment): keeping the target is safe, dropping it would cut traffic.
			klog.V(4).InfoS("Keeping a load balancer target whose Node is still eligible", "networkInterface", klog.KObj(nic))
			continue
		}
		write(nic, false)
	}
	writes.Wait()
	if len(errs) == 0 {
		t.nudgeSoon()
	}
	return targetReport{skipped: skipped, choice: choice}, errors.Join(errs...)
}

// nudgeDelay is how long after a change of the targets the selecting LoadBalancers are
// nudged: by then IronCore has seen the change on its watch. A nudge that fails is tried again
// after nudgeRetry.
const (
	nudgeDelay = 500 * time.Millisecond
	nudgeRetry = 5 * time.Second
)

// nudgeSoon schedules a nudge of the selecting LoadBalancers. IronCore v0.5.0, looking for the
// LoadBalancers a NetworkInterface change concerns, stops at the first LoadBalancer on the
// Network without a selector (a Local Service's, or one of the CCM in explicit mode): while one
// exists, selecting LoadBalancers may miss a target that is labelled, unlabelled, or gains or
// loses its addresses. Writing a digest of the targets on each of them makes IronCore recompute
// their routings. One nudge runs at a time; changes meanwhile schedule another.
func (t *targets) nudgeSoon() {
	t.labelsMu.Lock()
	defer t.labelsMu.Unlock()
	t.nudgeDue = true
	if t.nudgeScheduled {
		return
	}
	t.nudgeScheduled = true
	time.AfterFunc(nudgeDelay, t.nudge)
}

func (t *targets) nudge() {
	ctx := t.backgroundContext(context.Background())
	t.labelsMu.Lock()
	t.nudgeDue = false
	t.labelsMu.Unlock()
	err := t.nudgeOnce(ctx)
	if err != nil {
		klog.ErrorS(err, "Cannot nudge IronCore to recompute the routings of selecting LoadBalancers; retrying")
	}
	t.labelsMu.Lock()
	defer t.labelsMu.Unlock()
	switch {
	case ctx.Err() != nil:
		t.nudgeScheduled = false
	case err != nil:
		time.AfterFunc(nudgeRetry, t.nudge)
	case t.nudgeDue:
		time.AfterFunc(nudgeDelay, t.nudge)
	default:
		t.nudgeScheduled = false
	}
}

// nudgeOnce writes the digest of the current targets on every selecting LoadBalancer of the
// cluster that does not carry it yet, if a LoadBalancer on the Network does not select.
func (t *targets) nudgeOnce(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // no longer leading, or stopped: nothing to nudge
	}
	lbs, err := t.ironcore.LoadBalancers(ctx)
	if err != nil {
		return err
	}
	mixed := false
	var selecting []*networkingv1alpha1.LoadBalancer
	for i := range lbs {
		lb := &lbs[i]
		switch {
		case lb.Spec.NetworkRef.Name != t.network || lb.DeletionTimestamp != nil:
		case lb.Spec.NetworkInterfaceSelector == nil:
			mixed = true
		case lb.Labels[keys.LabelClusterName] == t.cluster && lb.Spec.NetworkInterfaceSelector.MatchLabels[keys.LabelLoadBalancerTarget] == t.cluster:
			selecting = append(selecting, lb)
		}
	}
	if !mixed || len(selecting) == 0 {
		return nil
	}
	digest, err := t.targetsDigest(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, lb := range selecting {
		if lb.Annotations[keys.AnnotationTargets] == digest {
			continue
		}
		if err := t.ironcore.AnnotateLoadBalancer(ctx, lb, keys.AnnotationTargets, digest); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// targetsDigest identifies the labelled targets as IronCore routes them: by name and addresses.
func (t *targets) targetsDigest(ctx context.Context) (string, error) {
	labelled, err := t.ironcore.NetworkInterfacesLabelled(ctx, keys.LabelLoadBalancerTarget, t.cluster)
	if err != nil {
		return "", err
	}
	entries := make([]string, 0, len(labelled))
	for _, nic := range labelled {
		entry := nic.Name + "=" + string(nic.Status.State)
		for _, ip := range nic.Status.IPs {
			entry += "," + ip.String()
		}
		entries = append(entries, entry)
	}
	slices.Sort(entries)
	hash := sha256.Sum256([]byte(strings.Join(entries, ";")))
	return hex.EncodeToString(hash[:8]), nil
}

// label makes the named NetworkInterface a target. A NetworkInterface not yet labelled as the
// cluster's (its Node is not initialized yet) gets that label in the same write: the
// LoadBalancers' selector wants both.
func (t *targets) label(ctx context.Context, name string) error {
	return t.ironcore.UpdateNetworkInterface(ctx, name, true, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		if nic.Labels[keys.LabelCluster] == t.cluster && nic.Labels[keys.LabelLoadBalancerTarget] == t.cluster {
			return false, nil
		}
		if err := claimForCluster(nic, t.cluster); err != nil {
			return false, err
		}
		nic.Labels[keys.LabelLoadBalancerTarget] = t.cluster
		return true, nil
	})
}

// claimForCluster labels nic as the cluster's unless it is already; a NetworkInterface of
// another cluster is an error, and left as it is.
func claimForCluster(nic *networkingv1alpha1.NetworkInterface, cluster string) error {
	owner, labelled := nic.Labels[keys.LabelCluster]
	switch {
	case labelled && owner != cluster:
		return fmt.Errorf("NetworkInterface %s belongs to cluster %q", nic.Name, owner)
	case !labelled:
		if nic.Labels == nil {
			nic.Labels = map[string]string{}
		}
		nic.Labels[keys.LabelCluster] = cluster
	}
	return nil
}

// candidates returns the Nodes the target rules choose from. A list given may be older than
// the CCM's Node lister, which the service controller's lists come from, so once the lister is
// set it alone decides: a Node of an old list that was deleted or excluded since is not
// brought back. Without a lister the list decides. With the health rule on, a Node being
// deleted or tainted for deletion by the cluster autoscaler is a candidate that the rule
// finds unhealthy, so that it is never the reason a load balancer has no targets; without it,
// such Nodes are left out here, as the service controller leaves them out.
func (t *targets) candidates(nodes []*corev1.Node) ([]*corev1.Node, error) {
	if t.nodes == nil {
		return nodes, nil
	}
	known, err := t.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	result := make([]*corev1.Node, 0, len(known))
	for _, node := range known {
		if ExcludedFromLoadBalancers(node) || (!t.health.Enabled && !EligibleForLoadBalancers(node)) {
			continue
		}
		result = append(result, node)
	}
	return result, nil
}

// choose applies the target rules to the resolved Nodes, for the Service's LoadBalancer (nil:
// the shared targets of the selector). It returns the chosen Nodes, in the order given.
func (t *targets) choose(ctx context.Context, service *corev1.Service, resolved []resolvedNode) ([]resolvedNode, targetrules.Choice, error) {
	local := service != nil && targetrules.Local(service)
	var serving map[string]bool
	if local {
		var err error
		if serving, err = t.servingNodes(ctx, service); err != nil {
			return nil, targetrules.Choice{}, err
		}
	}
	now := time.Now()
	candidates := make([]targetrules.Candidate, 0, len(resolved))
	for _, r := range resolved {
		candidates = append(candidates, targetrules.Candidate{Node: r.node.Name, Verdict: t.health.Check(r.node, r.machine, now)})
	}
	choice := targetrules.Choose(candidates, local, serving)
	targets := make(map[string]bool, len(choice.Targets))
	for _, name := range choice.Targets {
		targets[name] = true
	}
	chosen := make([]resolvedNode, 0, len(choice.Targets))
	for _, r := range resolved {
		if targets[r.node.Name] {
			chosen = append(chosen, r)
		}
	}
	return chosen, choice, nil
}

// endpointSlicesSyncWait bounds how long a sync waits for the EndpointSlice cache after a start.
const endpointSlicesSyncWait = 10 * time.Second

// servingNodes names the Nodes with an endpoint serving the Service. Without an EndpointSlice
// lister (no informers) no endpoints are known, which the rules treat as a Local Service
// without endpoints. Until the cache has synced it knows none either, so a sync waits for it
// rather than send a Local Service's traffic to every Node.
func (t *targets) servingNodes(ctx context.Context, service *corev1.Service) (map[string]bool, error) {
	if t.endpointSlices == nil {
		return nil, nil
	}
	if t.endpointSlicesSynced != nil && !t.endpointSlicesSynced() {
		waitCtx, cancel := context.WithTimeout(ctx, endpointSlicesSyncWait)
		defer cancel()
		if !toolscache.WaitForCacheSync(waitCtx.Done(), t.endpointSlicesSynced) {
			return nil, fmt.Errorf("the EndpointSlices of Service %s/%s are not known yet: the cache has not synced", service.Namespace, service.Name)
		}
	}
	slices, err := t.endpointSlices.EndpointSlices(service.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service.Name}))
	if err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", service.Namespace, service.Name, err)
	}
	return targetrules.ServingNodes(slices), nil
}

// keptMachines names the Machines whose labelled NetworkInterfaces stay targets even if their
// Node did not resolve this time: those of chosen Nodes, and those of candidates that did not
// resolve and that the health rule, from the Node alone, finds healthy.
func (t *targets) keptMachines(candidates []*corev1.Node, resolved, chosen []resolvedNode) map[string]bool {
	keep := map[string]bool{}
	seen := make(map[string]bool, len(resolved))
	for _, r := range resolved {
		seen[r.node.Name] = true
	}
	now := time.Now()
	for _, node := range candidates {
		if seen[node.Name] || !t.health.Check(node, nil, now).Healthy() {
			continue
		}
		if id, err := providerid.Parse(node.Spec.ProviderID); err == nil && id.Namespace == t.ironcore.Namespace() {
			keep[id.Machine] = true
		}
	}
	for _, r := range chosen {
		if r.machine != nil {
			keep[r.machine.Name] = true
		}
	}
	return keep
}

// eligibleNetworkInterfaces names the NetworkInterfaces of the Nodes the shared targets hold
// (see candidates and choose).
func (t *targets) eligibleNetworkInterfaces(ctx context.Context, nodes []*corev1.Node) (map[string]bool, error) {
	nodes, err := t.candidates(nodes)
	if err != nil {
		return nil, err
	}
	resolved, _, err := t.resolve(ctx, nodes, false)
	if err != nil {
		return nil, err
	}
	chosen, _, err := t.choose(ctx, nil, resolved)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, nic := range networkInterfacesOf(chosen) {
		names[nic.Name] = true
	}
	return names, nil
}

// EligibleForLoadBalancers reports whether the service controller passes the Node to load
// balancers: not being deleted, not excluded by label, not tainted for deletion by the cluster
// autoscaler (its stable node set predicates, k8s.io/cloud-provider v0.35).
func EligibleForLoadBalancers(node *corev1.Node) bool {
	if !node.DeletionTimestamp.IsZero() || ExcludedFromLoadBalancers(node) {
		return false
	}
	return !slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == servicecontroller.ToBeDeletedTaint })
}

// ExcludedFromLoadBalancers reads the exclusion label as the service controller does: any
// value but a false boolean excludes.
func ExcludedFromLoadBalancers(node *corev1.Node) bool {
	value, ok := node.Labels[corev1.LabelNodeExcludeBalancers]
	if !ok {
		return false
	}
	excluded, err := strconv.ParseBool(value)
	return err != nil || excluded
}

// destinations lists a LoadBalancerRouting destination for every IP of the NetworkInterfaces
// of the Nodes the target rules choose for the Service, in a stable order.
func (t *targets) destinations(ctx context.Context, service *corev1.Service, nodes []*corev1.Node) ([]networkingv1alpha1.LoadBalancerDestination, targetReport, error) {
	nodes, err := t.candidates(nodes)
	if err != nil {
		return nil, targetReport{}, err
	}
	resolved, skipped, err := t.resolve(ctx, nodes, true)
	if err != nil {
		return nil, targetReport{}, err
	}
	chosen, choice, err := t.choose(ctx, service, resolved)
	if err != nil {
		return nil, targetReport{}, err
	}
	destinations := []networkingv1alpha1.LoadBalancerDestination{}
	for _, nic := range networkInterfacesOf(chosen) {
		for _, ip := range nic.Status.IPs {
			destinations = append(destinations, networkingv1alpha1.LoadBalancerDestination{
				IP:        ip,
				TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{UID: nic.UID, Name: nic.Name, ProviderID: nic.Spec.ProviderID},
			})
		}
	}
	return destinations, targetReport{skipped: skipped, choice: choice}, nil
}
