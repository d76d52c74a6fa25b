package lbtargets

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// The label reconciler keeps the target label on exactly the NetworkInterfaces of the Nodes the
// target rules choose, and nudges IronCore when it would miss a change of them.

// errCacheBehind is returned by a sync that must not act before the cache shows this process's
// own writes; the cache's event for the write queues it again.
var errCacheBehind = errors.New("the IronCore cache does not show this process's last writes yet")

// labelRecord tells drift from a change of the desired targets, and keeps the digests written
// on LoadBalancers so that a cache behind that write does not cause the same write again.
type labelRecord struct {
	mu sync.Mutex
	// labelled are the NetworkInterfaces labelled after the last successful sync.
	labelled map[string]bool
	// deferred are the NetworkInterfaces whose label waits for the write of their Node's route.
	deferred map[string]bool
	nudged   map[types.UID]writtenDigest
	// repairs counts the labels put back after drift; the digest includes it, with the random
	// process ID, since a label put back changes no target, yet IronCore may miss it.
	repairs int
	process string
}

type writtenDigest struct {
	digest, resourceVersion string
}

// requestLabels queues a label sync and reports what the latest one found, without waiting.
func (t *Controller) requestLabels(service *corev1.Service) targetsapi.Report {
	t.mu.Lock()
	last := t.last
	t.mu.Unlock()
	t.queue.Add(key{kind: labelsKind})
	t.report(service, last)
	return last
}

// watchNetworkInterfaces queues a label sync on NetworkInterface changes that concern the
// labels, including this process's own label writes, which the nudge waits for.
func (t *Controller) watchNetworkInterfaces() {
	if !t.selecting {
		return
	}
	if err := t.ironcore.OnNetworkInterfaceUpdate(func(old, nic *networkingv1alpha1.NetworkInterface) {
		if old == nil || targetInputsChanged(old, nic) {
			t.queue.Add(key{kind: labelsKind})
		}
	}); err != nil {
		klog.ErrorS(err, "Cannot watch NetworkInterfaces for their load balancer target labels; they are synced on requests and resyncs only")
	}
}

func targetInputsChanged(old, nic *networkingv1alpha1.NetworkInterface) bool {
	return old.Labels[keys.LabelLoadBalancerTarget] != nic.Labels[keys.LabelLoadBalancerTarget] ||
		old.Labels[keys.LabelCluster] != nic.Labels[keys.LabelCluster] ||
		targetrules.NetworkInterfaceChanged(old, nic)
}

// syncLabels labels the chosen Nodes' NetworkInterfaces and unlabels this cluster's others.
func (t *Controller) syncLabels(ctx context.Context) error {
	if !t.selecting {
		// Writing labels would cost a write per Node for nothing, and removing those left from
		// selector mode could empty the routing of a LoadBalancer that still selects.
		return nil
	}
	nodes, err := t.candidates()
	if err != nil {
		return err
	}
	resolved, skipped, err := t.resolve(ctx, nodes)
	if err != nil {
		return err
	}
	labelled, err := t.ironcore.NetworkInterfacesLabelledView(ctx, keys.LabelLoadBalancerTarget, t.cluster)
	if err != nil {
		return err
	}
	have := make(map[string]bool, len(labelled))
	for _, nic := range labelled {
		have[nic.Name] = true
	}
	// The labels are the targets now, so the grace period survives restarts.
	chosen, choice, err := t.choose(ctx, nil, resolved, func(context.Context) (map[string]bool, error) { return have, nil })
	if err != nil {
		return err
	}
	nodesOf := nodesByNetworkInterface(resolved)
	now := time.Now()
	want := map[string]bool{}
	var add, remove []string
	later := map[string]time.Duration{}
	for _, nic := range servingInterfacesOf(chosen) {
		want[nic.Name] = true
		if have[nic.Name] {
			continue
		}
		if node := nodesOf[nic.Name]; node != nil {
			if left := t.routeWait.Left(node, nic, now); left > 0 {
				later[nic.Name] = left
				continue
			}
		}
		add = append(add, nic.Name)
	}
	for _, nic := range labelled {
		if !want[nic.Name] {
			remove = append(remove, nic.Name)
		}
	}
	// Labels still to come are no drift, nor targets IronCore may be nudged for yet.
	written := maps.Clone(want)
	for name := range later {
		delete(written, name)
	}
	drifted := t.countDrift(have, written, nodesOf)
	t.writeLabelsLater(ctx, later)
	err = t.writeLabels(ctx, add, remove)
	t.mu.Lock()
	t.last = newReport(skipped, choice)
	t.mu.Unlock()
	t.reportSelecting(t.last)
	if err != nil {
		return err
	}
	t.labels.mu.Lock()
	t.labels.labelled = written
	t.labels.repairs += drifted
	t.labels.mu.Unlock()
	// The nudge takes seconds at hundreds of Services; a target change must not wait for it.
	t.queue.Add(key{kind: nudgeKind})
	return nil
}

// reportSelecting records what a label sync found on every selecting Service, not only on
// those the service controller syncs next.
func (t *Controller) reportSelecting(report targetsapi.Report) {
	services, err := t.listers.services.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list the Services to report their targets on")
		return
	}
	for _, service := range services {
		if t.class.Wants(service) && !targetrules.Local(service) {
			t.report(service, report)
		}
	}
}

// countDrift counts, and records on their Nodes, the labels changed behind this reconciler's
// back since the last sync.
func (t *Controller) countDrift(have, want map[string]bool, nodes map[string]*corev1.Node) int {
	t.labels.mu.Lock()
	before := t.labels.labelled
	t.labels.mu.Unlock()
	if before == nil {
		return 0
	}
	var drifted []string
	for name := range before {
		if want[name] && !have[name] {
			drifted = append(drifted, name)
		}
	}
	for name := range have {
		if !want[name] && !before[name] {
			drifted = append(drifted, name)
		}
	}
	if len(drifted) == 0 {
		return 0
	}
	slices.Sort(drifted)
	metrics.LoadBalancerTargetDriftRepaired.WithLabelValues("label").Add(float64(len(drifted)))
	klog.InfoS("Load balancer target labels were changed outside the CCM; putting them back", "networkInterfaces", drifted)
	for _, name := range drifted {
		if node := nodes[name]; node != nil && t.recorder != nil {
			t.recorder.Eventf(node, corev1.EventTypeNormal, ReasonDriftRepaired,
				"The load balancer target label %s of NetworkInterface %s was changed outside the CCM; it was put back (target: %t)",
				keys.LabelLoadBalancerTarget, name, want[name])
		}
	}
	return len(drifted)
}

func nodesByNetworkInterface(resolved []resolvedNode) map[string]*corev1.Node {
	nodes := map[string]*corev1.Node{}
	for _, r := range resolved {
		for _, nic := range r.nics {
			nodes[nic.Name] = r.node
		}
	}
	return nodes
}

// writeLabels writes all labels at once: each joins whatever else is due for its
// NetworkInterface in one patch, and the client's rate limiter sets the pace.
func (t *Controller) writeLabels(ctx context.Context, add, remove []string) error {
	var (
		writes sync.WaitGroup
		mu     sync.Mutex
		errs   []error
	)
	write := func(name string, label bool) {
		writes.Go(func() {
			err := t.ironcore.UpdateNetworkInterface(ctx, name, true, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
				return setTargetLabel(nic, t.cluster, label)
			})
			if ironcore.IsNotFound(err) {
				return
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			klog.V(2).InfoS("Load balancer target label written", "networkInterface", klog.KRef(t.ironcore.Namespace(), name), "target", label)
		})
	}
	for _, name := range add {
		write(name, true)
	}
	for _, name := range remove {
		write(name, false)
	}
	writes.Wait()
	return errors.Join(errs...)
}

// DefaultLabelRouteWait bounds how long after a Node's creation its target label may wait for the write
// of its route (ironcore.RouteWait). Under a burst of new Nodes, Nodes are initialized and
// become targets a second or two before their routes are written; each label written on its own
// is one more NetworkInterface patch, and IronCore reconciles every LoadBalancer on the Network
// for each.
const DefaultLabelRouteWait = 10 * time.Second

// writeLabelsLater has the target label of each named NetworkInterface go with the write of its
// Node's route, or be written on its own when the wait is over. Each is submitted once; the
// label is written only if the latest sync still leaves it to the route, so a Node that stops
// serving meanwhile is never labelled, and one whose wait ran out is labelled by writeLabels.
func (t *Controller) writeLabelsLater(ctx context.Context, later map[string]time.Duration) {
	t.labels.mu.Lock()
	submitted := t.labels.deferred
	t.labels.deferred = make(map[string]bool, len(later))
	for name := range later {
		t.labels.deferred[name] = true
	}
	t.labels.mu.Unlock()
	for name, left := range later {
		if submitted[name] {
			continue
		}
		t.ironcore.UpdateNetworkInterfaceLater(ctx, name, left, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			t.labels.mu.Lock()
			deferred := t.labels.deferred[name]
			t.labels.mu.Unlock()
			if !deferred {
				return false, nil
			}
			return setTargetLabel(nic, t.cluster, true)
		}, func(wrote bool, err error) {
			t.labels.mu.Lock()
			delete(t.labels.deferred, name)
			t.labels.mu.Unlock()
			switch {
			case err != nil && !ironcore.IsNotFound(err):
				klog.ErrorS(err, "Cannot write a load balancer target label left to its route; syncing the labels again")
				t.queue.AddRateLimited(key{kind: labelsKind})
			case wrote:
				klog.V(2).InfoS("Load balancer target label written", "networkInterface", klog.KRef(t.ironcore.Namespace(), name), "target", true)
			}
		})
	}
}

// labelIfServing rides along every NetworkInterface write (ironcore.RideAlong): the
// NetworkInterface of a Node found able to serve since the last label sync gets its label in
// the same patch, usually its route's under a burst of new Nodes, rather than in one of its own
// after it. It decides on the Node's last verdict and the lister's Node, and leaves alone a write
// that sets or removes the label itself: that is the label sync's decision, on newer inputs.
func (t *Controller) labelIfServing(base, nic *networkingv1alpha1.NetworkInterface) bool {
	if base.Labels[keys.LabelLoadBalancerTarget] != nic.Labels[keys.LabelLoadBalancerTarget] ||
		nic.Labels[keys.LabelLoadBalancerTarget] == t.cluster ||
		nic.Spec.NetworkRef.Name != t.network || nic.Spec.MachineRef == nil || !targetrules.ServesTraffic(nic) {
		return false
	}
	t.nodesMu.Lock()
	name, ok := t.machineNodes[nic.Spec.MachineRef.Name]
	state, known := t.known[name]
	t.nodesMu.Unlock()
	if !ok || !known || !state.eligible || state.unhealthy != "" {
		return false
	}
	if node, err := t.listers.nodes.Get(name); err != nil || !targetrules.Eligible(node) {
		return false
	}
	changed, err := setTargetLabel(nic, t.cluster, true)
	return err == nil && changed
}

// setTargetLabel makes nic a target of the cluster's load balancers, or not. It adds the cluster
// label too if missing (a Node not initialized yet): the LoadBalancers' selector wants both.
func setTargetLabel(nic *networkingv1alpha1.NetworkInterface, cluster string, target bool) (bool, error) {
	if !target {
		if _, ok := nic.Labels[keys.LabelLoadBalancerTarget]; !ok {
			return false, nil
		}
		delete(nic.Labels, keys.LabelLoadBalancerTarget)
		return true, nil
	}
	if nic.Labels[keys.LabelCluster] == cluster && nic.Labels[keys.LabelLoadBalancerTarget] == cluster {
		return false, nil
	}
	if err := ironcore.ClaimForCluster(nic, cluster); err != nil {
		return false, err
	}
	nic.Labels[keys.LabelLoadBalancerTarget] = cluster
	return true, nil
}
