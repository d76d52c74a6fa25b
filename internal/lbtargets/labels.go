package lbtargets

import (
	"context"
	"errors"
	"slices"
	"sync"

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

// The label reconciler keeps the target label (keys.LabelLoadBalancerTarget) on exactly the
// NetworkInterfaces of the Nodes the target rules choose, and nudges IronCore when it would
// miss a change of them. It is level-triggered, as Kubernetes' EndpointSlice controller is:
// every trigger (a request of the provider, a NetworkInterface change, a Node's verdict
// changing, a resync) only queues its one key; the sync computes the desired
// labels from the listers and the IronCore cache, and compares them with the labels as this
// process knows them newest, from the cache or, where the cache does not show them yet, from
// its own last write of the NetworkInterface. Retries are the queue's.

// errCacheBehind is returned by a sync that must not act before the cache shows this process's
// own writes; the queue retries it, and the cache's event for the write queues it too.
var errCacheBehind = errors.New("the IronCore cache does not show this process's last writes yet")

// labelRecord is what the label reconciler last found in place, to tell drift (a label changed
// behind its back) from a change of the desired targets, and the digests it wrote on
// LoadBalancers, so that a cache behind that write does not make it write the same again.
type labelRecord struct {
	mu sync.Mutex
	// labelled are the NetworkInterfaces labelled after the last sync that succeeded; nil
	// before the first.
	labelled map[string]bool
	// nudged holds, by LoadBalancer UID, the digest written and the resource version it left.
	nudged map[types.UID]writtenDigest
	// repairs counts the labels this process put back after they were changed behind its
	// back; the digest includes it, with process (random, this process's own), since a label
	// put back changes no target, yet IronCore may miss it as it misses any other.
	repairs int
	process string
}

type writtenDigest struct {
	digest, resourceVersion string
}

// requestLabels queues a sync of the target labels for a Service whose LoadBalancer selects
// them; it records on the Service, and returns, what the latest sync found. It does not wait
// for the writes.
func (t *Controller) requestLabels(service *corev1.Service) targetsapi.Report {
	t.mu.Lock()
	last := t.last
	t.mu.Unlock()
	t.queue.Add(key{kind: labelsKind})
	t.report(service, last)
	return last
}

// watchNetworkInterfaces queues a label sync on every NetworkInterface change that concerns
// the labels: a target label changed (by this process, which the nudge waits for, or by anyone
// else, which is drift), the cluster label, the addresses and the attachment.
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

// targetInputsChanged tells whether a NetworkInterface change concerns the target labels or
// what IronCore routes to (its state and addresses).
func targetInputsChanged(old, nic *networkingv1alpha1.NetworkInterface) bool {
	return old.Labels[keys.LabelLoadBalancerTarget] != nic.Labels[keys.LabelLoadBalancerTarget] ||
		old.Labels[keys.LabelCluster] != nic.Labels[keys.LabelCluster] ||
		targetrules.NetworkInterfaceChanged(old, nic)
}

// syncLabels labels the NetworkInterfaces of the Nodes the target rules choose and unlabels
// this cluster's other targets, writing only what differs from the labels as this process
// knows them newest, then nudges IronCore if it would miss the change (nudgeSelecting).
func (t *Controller) syncLabels(ctx context.Context) error {
	if !t.selecting {
		// No LoadBalancer of this process selects by the label: writing it would cost a
		// NetworkInterface write per Node for nothing, and removing labels left from selector
		// mode could empty the routing of a LoadBalancer that still selects (until its Service's
		// sync writes its routing and drops the selector).
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
	// The labels are the targets now: a labelled Node that stops being Ready keeps its label
	// for the grace period, across restarts of this process too.
	chosen, choice, err := t.choose(ctx, nil, resolved, func(context.Context) (map[string]bool, error) { return have, nil })
	if err != nil {
		return err
	}
	want := map[string]bool{}
	var add, remove []string
	for _, nic := range servingInterfacesOf(chosen) {
		want[nic.Name] = true
		if !have[nic.Name] {
			add = append(add, nic.Name)
		}
	}
	for _, nic := range labelled {
		if !want[nic.Name] {
			remove = append(remove, nic.Name)
		}
	}
	drifted := t.countDrift(have, want, nodesByNetworkInterface(resolved))
	err = t.writeLabels(ctx, add, remove)
	t.mu.Lock()
	t.last = newReport(skipped, choice)
	t.mu.Unlock()
	t.reportSelecting(t.last)
	if err != nil {
		return err
	}
	t.labels.mu.Lock()
	t.labels.labelled = want
	t.labels.repairs += drifted
	t.labels.mu.Unlock()
	// The nudge is a key of its own: written one LoadBalancer at a time, it takes seconds at
	// hundreds of Services, and a target change meanwhile must not wait for it.
	t.queue.Add(key{kind: nudgeKind})
	return nil
}

// reportSelecting records what a label sync found on every Service whose LoadBalancer selects
// the targets (not only on those the service controller happens to sync next).
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

// countDrift counts the labels that differ from what the last sync left in place while the
// desired targets did not change for them: labels removed from a target, or added to a
// NetworkInterface that is not one, behind this reconciler's back. Each is recorded on its
// Node, which is what gained or lost traffic. It returns how many there are.
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

// nodesByNetworkInterface maps the resolved Nodes' NetworkInterfaces to their Nodes.
func nodesByNetworkInterface(resolved []resolvedNode) map[string]*corev1.Node {
	nodes := map[string]*corev1.Node{}
	for _, r := range resolved {
		for _, nic := range r.nics {
			nodes[nic.Name] = r.node
		}
	}
	return nodes
}

// writeLabels labels and unlabels the named NetworkInterfaces, all at once: each write joins
// whatever else is due for its NetworkInterface (a new Node's route, say) in one patch, and
// the client's rate limiter, not a round trip per NetworkInterface, sets the pace.
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
				// Gone with its Machine: nothing left to label.
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

// setTargetLabel makes nic a target of the cluster's load balancers, or not. A
// NetworkInterface not yet labelled as the cluster's (its Node is not initialized yet) gets
// that label in the same write: the LoadBalancers' selector wants both.
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
