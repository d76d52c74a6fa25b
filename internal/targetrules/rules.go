// Package targetrules decides which Nodes receive a load balancer's traffic beyond the
// service controller's own rules. IronCore LoadBalancers have no health checks: they send
// traffic to every target NetworkInterface, so the CCM keeps Nodes that cannot serve out of
// the targets. Two rules apply: a Node must be healthy (Health), and a Service with
// externalTrafficPolicy Local goes only to Nodes with a serving endpoint (ServingNodes). The
// functions are pure; the provider and the inspect tool apply them alike.
package targetrules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
)

// ErrNodesSkipped marks the error naming Nodes that could not be made targets (a
// NetworkInterface without addresses yet, or of another cluster). The other Nodes were
// applied; the Nodes' own changes bring them in, so a caller need not retry for them.
var ErrNodesSkipped = errors.New("not load balancer targets")

// DefaultReadyGrace is how long a Node's Ready condition may be False or Unknown before the
// Node stops receiving load balancer traffic. It rides out a kubelet restart and the node
// lifecycle controller's own delay (Unknown after 50 s without heartbeats) without moving
// traffic, and keeps a Node that is really gone from black-holing its share for long.
const DefaultReadyGrace = time.Minute

// Health is the Node health rule.
type Health struct {
	// Enabled switches the rule on. Off, only the service controller's rules apply.
	Enabled bool
	// ReadyGrace is how long Ready may be False or Unknown before it counts.
	ReadyGrace time.Duration
}

// Why a Node is unhealthy; stable, used as a metric label.
const (
	KindDeleting     = "deleting"
	KindAutoscaler   = "autoscaler-deletion"
	KindShutdown     = "shutdown-taint"
	KindMachineState = "machine-state"
	KindNotReady     = "not-ready"
)

// Verdict is the outcome of the health rule for one Node.
type Verdict struct {
	// Kind is one of the Kind constants; empty if the Node is healthy.
	Kind string
	// Reason says why, for events and logs.
	Reason string
	// RecheckIn is, for a healthy Node whose Ready condition is False or Unknown, how long until
	// the grace period ends and the Node counts as unhealthy; zero otherwise.
	RecheckIn time.Duration
}

// Healthy reports whether the verdict keeps the Node a target.
func (v Verdict) Healthy() bool { return v.Kind == "" }

// Check applies the rule to a Node and its Machine (nil when not known) at the time now. A
// Machine without a state, or Pending on its way to Running, does not count against the Node:
// its Ready condition decides. A Node without a Ready condition has not reported yet and is
// healthy.
func (h Health) Check(node *corev1.Node, machine *computev1alpha1.Machine, now time.Time) Verdict {
	if !h.Enabled {
		return Verdict{}
	}
	switch {
	case !node.DeletionTimestamp.IsZero():
		return Verdict{Kind: KindDeleting, Reason: "the Node is being deleted"}
	case hasTaint(node, servicecontroller.ToBeDeletedTaint):
		return Verdict{Kind: KindAutoscaler, Reason: "the cluster autoscaler is deleting the Node (taint " + servicecontroller.ToBeDeletedTaint + ")"}
	case hasTaint(node, cloudproviderapi.TaintNodeShutdown):
		return Verdict{Kind: KindShutdown, Reason: "the Node is shut down (taint " + cloudproviderapi.TaintNodeShutdown + ")"}
	}
	if machine != nil {
		switch state := machine.Status.State; state {
		case "", computev1alpha1.MachineStateRunning, computev1alpha1.MachineStatePending:
		default:
			return Verdict{Kind: KindMachineState, Reason: fmt.Sprintf("its Machine %s is %s", machine.Name, state)}
		}
	}
	for _, condition := range node.Status.Conditions {
		if condition.Type != corev1.NodeReady || condition.Status == corev1.ConditionTrue {
			continue
		}
		since := now.Sub(condition.LastTransitionTime.Time)
		if since < h.ReadyGrace {
			return Verdict{RecheckIn: h.ReadyGrace - since}
		}
		return Verdict{Kind: KindNotReady, Reason: fmt.Sprintf("its Ready condition has been %s for %s (grace period %s)",
			condition.Status, since.Round(time.Second), h.ReadyGrace)}
	}
	return Verdict{}
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == key })
}

// ServingNodes names the Nodes that have an endpoint serving the Service, from the Service's
// EndpointSlices. An endpoint serves while its serving condition is true, which a terminating
// Pod keeps until it stops accepting connections, so a rolling update drains rather than cuts;
// a missing serving condition means ready, and a missing ready condition means true, as the
// EndpointSlice API defines them. kube-proxy sends a Local Service's external traffic to the
// same endpoints.
func ServingNodes(slices []*discoveryv1.EndpointSlice) map[string]bool {
	nodes := map[string]bool{}
	for _, slice := range slices {
		for _, endpoint := range slice.Endpoints {
			if endpoint.NodeName != nil && *endpoint.NodeName != "" && serving(endpoint.Conditions) {
				nodes[*endpoint.NodeName] = true
			}
		}
	}
	return nodes
}

func serving(conditions discoveryv1.EndpointConditions) bool {
	if conditions.Serving != nil {
		return *conditions.Serving
	}
	return conditions.Ready == nil || *conditions.Ready
}

// Local reports whether the Service sends external traffic only to Nodes with a local
// endpoint.
func Local(service *corev1.Service) bool {
	return service.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// Candidate is a Node that the service controller's rules let be a target, with the health
// rule's verdict on it.
type Candidate struct {
	Node    string
	Verdict Verdict
}

// Choice is what the rules make of a load balancer's candidates.
type Choice struct {
	// Targets are the Nodes that receive the load balancer's traffic.
	Targets []string
	// Unhealthy are the Nodes the health rule left out, with its verdicts; with FailedOpen they
	// are targets all the same.
	Unhealthy map[string]Verdict
	// WithoutEndpoint are the Nodes a Local Service leaves out for having no serving endpoint.
	WithoutEndpoint []string
	// FailedOpen is set when every Node that could serve is unhealthy: then all of them stay
	// targets, as a load balancer's health check fails open, since none would serve at all.
	FailedOpen bool
	// NoLocalEndpoints is set for a Local Service none of whose candidates has a serving
	// endpoint: then it targets every (healthy) candidate, as a Cluster Service would. Its
	// traffic is refused by kube-proxy on the Nodes rather than dropped by the LoadBalancer, and
	// the first endpoint to come up is served without waiting for a routing change.
	NoLocalEndpoints bool
}

// Choose applies the rules to the candidates: for a Local Service only Nodes in serving,
// then only healthy Nodes, never leaving none because of health.
func Choose(candidates []Candidate, local bool, serving map[string]bool) Choice {
	var choice Choice
	pool := candidates
	if local {
		var withEndpoint []Candidate
		for _, candidate := range candidates {
			if serving[candidate.Node] {
				withEndpoint = append(withEndpoint, candidate)
			} else {
				choice.WithoutEndpoint = append(choice.WithoutEndpoint, candidate.Node)
			}
		}
		if len(withEndpoint) == 0 {
			choice.NoLocalEndpoints, choice.WithoutEndpoint = true, nil
		} else {
			pool = withEndpoint
		}
	}
	for _, candidate := range pool {
		if candidate.Verdict.Healthy() {
			choice.Targets = append(choice.Targets, candidate.Node)
			continue
		}
		if choice.Unhealthy == nil {
			choice.Unhealthy = map[string]Verdict{}
		}
		choice.Unhealthy[candidate.Node] = candidate.Verdict
	}
	if len(choice.Targets) == 0 && len(pool) > 0 {
		choice.FailedOpen = true
		for _, candidate := range pool {
			choice.Targets = append(choice.Targets, candidate.Node)
		}
	}
	return choice
}

// Eligible reports whether the service controller passes the Node to load balancers: not
// being deleted, not excluded by label, not tainted for deletion by the cluster autoscaler
// (its stable node set predicates, k8s.io/cloud-provider v0.35).
func Eligible(node *corev1.Node) bool {
	if !node.DeletionTimestamp.IsZero() || Excluded(node) {
		return false
	}
	return !hasTaint(node, servicecontroller.ToBeDeletedTaint)
}

// Excluded reads the exclusion label as the service controller does: any value but a false
// boolean excludes.
func Excluded(node *corev1.Node) bool {
	value, ok := node.Labels[corev1.LabelNodeExcludeBalancers]
	if !ok {
		return false
	}
	excluded, err := strconv.ParseBool(value)
	return err != nil || excluded
}
