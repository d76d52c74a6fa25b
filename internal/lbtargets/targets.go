package lbtargets

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// Controller is the load balancer targets controller (see the package documentation).
type Controller struct {
	ironcore *ironcore.Client
	cluster  string
	network  string
	// selecting tells whether this cluster's LoadBalancers select their targets by label.
	selecting bool
	// routeWait leaves a new Node's target label to the write of its route.
	routeWait ironcore.RouteWait
	health    targetrules.Health
	class     lbclass.Policy
	owners    ironcore.Owners
	recorder  record.EventRecorder // may be nil
	coalesce  time.Duration
	resync    time.Duration
	// explain: see Config.Explain.
	explain bool
	// firstFor is how long a new LoadBalancer's routing may hold its first Nodes only.
	firstFor time.Duration
	// listers decide eligibility: the Node lister is at least as new as any Node list the service
	// controller passes.
	listers listers

	queue   workqueue.TypedRateLimitingInterface[key]
	routing routingState
	// mu guards last, what the latest label sync found.
	mu     sync.Mutex
	last   targetsapi.Report
	labels labelRecord
	nodeVerdicts
	notices targetsapi.Notices
	moves   selectorMoves
	// leftOut remembers the Nodes logged as not IronCore Machines of this cluster, so that each
	// is logged once.
	leftOut sync.Map
}

type listers struct {
	nodes                corelisters.NodeLister
	services             corelisters.ServiceLister
	endpointSlices       discoverylisters.EndpointSliceLister
	endpointSlicesSynced func() bool
	// synced tell whether the Node and Service caches have synced: until then an empty lister
	// is not an empty cluster, and no sync may act on it.
	synced []toolscache.InformerSynced
}

func newReport(skipped targetsapi.Skipped, choice targetrules.Choice) targetsapi.Report {
	report := targetsapi.Report{Skipped: skipped, Targets: len(choice.Targets), NoLocalEndpoints: choice.NoLocalEndpoints}
	if choice.FailedOpen {
		report.FailedOpen = describeUnhealthy(choice.Unhealthy)
	}
	return report
}

// endpointSlicesSyncWait bounds how long a sync waits for the EndpointSlice cache after a start.
const endpointSlicesSyncWait = 10 * time.Second

// targetsNow tells which NetworkInterfaces are targets now, as IronCore shows them; it is asked
// only about Nodes that are not Ready, for the grace period.
type targetsNow func(context.Context) (map[string]bool, error)

// noTargetsNow is for questions where no Node is a target yet.
func noTargetsNow(context.Context) (map[string]bool, error) { return nil, nil }

// verdict applies the rule to a resolved Node, reading current only when the Node fails on
// Ready alone: only then does it matter whether it is a target now.
func (t *Controller) verdict(ctx context.Context, r resolvedNode, current targetsNow, now time.Time) (targetrules.Verdict, error) {
	in := targetrules.Inputs{Node: r.node, Machine: r.machine, NetworkInterfaces: r.nics}
	verdict := t.health.Check(in, now)
	if verdict.Kind != targetrules.KindNeverReady || !targetrules.ReportsReady(r.node) {
		return verdict, nil
	}
	targets, err := current(ctx)
	if err != nil {
		return targetrules.Verdict{}, err
	}
	in.Target = slices.ContainsFunc(r.nics, func(nic *networkingv1alpha1.NetworkInterface) bool { return targets[nic.Name] })
	return t.health.Check(in, now), nil
}

// choose applies the target rules for the Service (nil: the selector's shared targets),
// keeping resolved's order.
func (t *Controller) choose(ctx context.Context, service *corev1.Service, resolved []resolvedNode, current targetsNow) ([]resolvedNode, targetrules.Choice, error) {
	local := service != nil && targetrules.Local(service)
	var serving map[string]bool
	if local {
		var err error
		if serving, err = t.servingNodes(ctx, service); err != nil {
			return nil, targetrules.Choice{}, err
		}
	}
	now := time.Now()
	current = once(current)
	candidates := make([]targetrules.Candidate, 0, len(resolved))
	for _, r := range resolved {
		verdict, err := t.verdict(ctx, r, current, now)
		if err != nil {
			return nil, targetrules.Choice{}, err
		}
		candidates = append(candidates, targetrules.Candidate{Node: r.node.Name, Verdict: verdict})
	}
	choice := targetrules.Choose(candidates, local, serving)
	chosen := make([]resolvedNode, 0, len(choice.Targets))
	for _, r := range resolved {
		if len(chosen) < len(choice.Targets) && choice.Targets[len(chosen)] == r.node.Name {
			chosen = append(chosen, r)
		}
	}
	return chosen, choice, nil
}

func once(current targetsNow) targetsNow {
	var (
		done    bool
		targets map[string]bool
		err     error
	)
	return func(ctx context.Context) (map[string]bool, error) {
		if !done {
			targets, err = current(ctx)
			done = err == nil
		}
		return targets, err
	}
}

// servingNodes names the Nodes with an endpoint serving the Service. It waits for the cache
// rather than send a Local Service's traffic to every Node as if it had no endpoints.
func (t *Controller) servingNodes(ctx context.Context, service *corev1.Service) (map[string]bool, error) {
	l := t.listers
	if !l.endpointSlicesSynced() {
		waitCtx, cancel := context.WithTimeout(ctx, endpointSlicesSyncWait)
		defer cancel()
		if !toolscache.WaitForCacheSync(waitCtx.Done(), l.endpointSlicesSynced) {
			return nil, fmt.Errorf("the EndpointSlices of Service %s/%s are not known yet: the cache has not synced", service.Namespace, service.Name)
		}
	}
	slices, err := l.endpointSlices.EndpointSlices(service.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service.Name}))
	if err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", service.Namespace, service.Name, err)
	}
	return targetrules.ServingNodes(slices), nil
}

// EligibleNetworkInterfaces names the NetworkInterfaces of the shared targets, given the
// current ones.
func (t *Controller) EligibleNetworkInterfaces(ctx context.Context, current map[string]bool) (map[string]bool, error) {
	nodes, err := t.candidates()
	if err != nil {
		return nil, err
	}
	resolved, _, err := t.resolve(ctx, nodes)
	if err != nil {
		return nil, err
	}
	chosen, _, err := t.choose(ctx, nil, resolved, func(context.Context) (map[string]bool, error) { return current, nil })
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, nic := range servingInterfacesOf(chosen) {
		names[nic.Name] = true
	}
	return names, nil
}

// Destinations lists the routing destinations of the Nodes the rules choose for the Service,
// in a stable order; a positive limit keeps only the first Nodes (see firstTargets). left says
// why the others are not targets (see leftOut).
func (t *Controller) Destinations(ctx context.Context, service *corev1.Service, current targetsNow, limit int, routed map[string]bool) (_ []networkingv1alpha1.LoadBalancerDestination, _ targetsapi.Report, left leftOut, err error) {
	nodes, err := t.candidates()
	if err != nil {
		return nil, targetsapi.Report{}, leftOut{}, err
	}
	resolved, skipped, err := t.resolve(ctx, nodes)
	if err != nil {
		return nil, targetsapi.Report{}, leftOut{}, err
	}
	chosen, choice, err := t.choose(ctx, service, resolved, current)
	if err != nil {
		return nil, targetsapi.Report{}, leftOut{}, err
	}
	if limit > 0 && len(chosen) > limit {
		chosen = firstOf(chosen, limit, routed)
	}
	destinations := []networkingv1alpha1.LoadBalancerDestination{}
	for _, nic := range servingInterfacesOf(chosen) {
		for _, ip := range nic.Status.IPs {
			destinations = append(destinations, networkingv1alpha1.LoadBalancerDestination{
				IP:        ip,
				TargetRef: &networkingv1alpha1.LoadBalancerTargetRef{UID: nic.UID, Name: nic.Name, ProviderID: nic.Spec.ProviderID},
			})
		}
	}
	return destinations, newReport(skipped, choice), leftOut{resolved: resolved, choice: choice, skipped: skipped}, nil
}

// leftOut is what a target choice left out, for Explain.
type leftOut struct {
	resolved []resolvedNode
	choice   targetrules.Choice
	skipped  targetsapi.Skipped
}

// Explain names the Nodes the choice left out and why: by NetworkInterface where the Node has
// one (a routing's destinations name them), by "node/<name>" otherwise. Nodes that were no
// candidates at all (excluded by label) are not named: they are the same for every Service.
func (l leftOut) Explain() map[string]string {
	why := map[string]string{}
	for _, r := range l.resolved {
		var reason string
		if verdict, ok := l.choice.Unhealthy[r.node.Name]; ok && !l.choice.FailedOpen {
			reason = verdict.Reason
		} else if slices.Contains(l.choice.WithoutEndpoint, r.node.Name) {
			reason = "no serving endpoint of the Service (externalTrafficPolicy Local)"
		}
		if reason == "" {
			continue
		}
		for _, nic := range r.nics {
			why[nic.Name] = fmt.Sprintf("Node %s: %s", r.node.Name, reason)
		}
		if len(r.nics) == 0 {
			why["node/"+r.node.Name] = reason
		}
	}
	for _, skipped := range l.skipped {
		why[fmt.Sprintf("skipped/%d", len(why))] = skipped
	}
	return why
}

// firstOf returns n Nodes of resolved, those routed first, then the longest-standing, so that
// the same ones stay first as Nodes join or come back.
func firstOf(resolved []resolvedNode, n int, routed map[string]bool) []resolvedNode {
	isRouted := func(r resolvedNode) bool {
		return slices.ContainsFunc(r.nics, func(nic *networkingv1alpha1.NetworkInterface) bool { return routed[nic.Name] })
	}
	sorted := slices.Clone(resolved)
	slices.SortFunc(sorted, func(a, b resolvedNode) int {
		return cmp.Or(-cmpBool(isRouted(a), isRouted(b)), a.node.CreationTimestamp.Compare(b.node.CreationTimestamp.Time), cmp.Compare(a.node.Name, b.node.Name))
	})
	return sorted[:n]
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Expects reports whether the Service's LoadBalancer should have somewhere to send traffic now;
// until the IronCore cache has synced it cannot tell.
func (t *Controller) Expects(ctx context.Context, service *corev1.Service) (bool, error) {
	if !t.ironcore.HasSynced() {
		return false, errors.New("the IronCore cache has not synced yet")
	}
	if !targetrules.Local(service) {
		// It is asked on every write of an empty routing, so it stops at the first Node that
		// can serve rather than resolve them all.
		candidates, err := t.candidates()
		if err != nil {
			return false, err
		}
		now := time.Now()
		for _, node := range candidates {
			resolved, _, err := t.resolve(ctx, []*corev1.Node{node})
			if err != nil {
				return false, err
			}
			for _, r := range resolved {
				verdict, err := t.verdict(ctx, r, noTargetsNow, now)
				if err != nil {
					return false, err
				}
				if verdict.Healthy() {
					return true, nil
				}
			}
		}
	}
	// A Local Service's own endpoints, or the rules' choice when no Node is healthy.
	own := service
	if t.selecting && !targetrules.Local(service) {
		own = nil
	}
	destinations, _, _, err := t.Destinations(ctx, own, noTargetsNow, 1, nil)
	return len(destinations) > 0, err
}

// NodeVerdict applies the target rules to one Node; ok is false for a Node that is not an
// IronCore Machine of this namespace. graceLeft is when a NotReady Node's grace period would
// end even if it is no target here: the routings judge that from IronCore.
func (t *Controller) NodeVerdict(ctx context.Context, node *corev1.Node, target bool) (verdict targetrules.Verdict, graceLeft time.Duration, ok bool, err error) {
	r, reason, quiet, err := t.resolveNode(ctx, node)
	if err != nil || quiet {
		return targetrules.Verdict{}, 0, false, err
	}
	if reason != "" {
		return targetrules.Verdict{Kind: targetrules.KindNetworkInterface, Reason: reason}, 0, true, nil
	}
	now := time.Now()
	in := targetrules.Inputs{Node: r.node, Machine: r.machine, NetworkInterfaces: r.nics, Target: target}
	verdict = t.health.Check(in, now)
	in.Target = true
	return verdict, t.health.Check(in, now).RecheckIn, true, nil
}
