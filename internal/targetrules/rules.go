// Package targetrules decides which Nodes receive a load balancer's traffic. IronCore
// LoadBalancers have no health checks and send traffic to every target NetworkInterface, so the
// CCM's choice of targets is the only health check a Service has. The functions are pure so that
// the targets controller and the inspect tool agree.
//
// A Node that fails a fact IronCore routes by (initialized, Machine present, a serving
// NetworkInterface) or that certainly cannot serve (being deleted, shut down, Machine stopped) is
// never a target. The other checks fail open: when no Node that could serve passes them, all
// such Nodes stay targets, since otherwise none would serve at all.
package targetrules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	cloudproviderapi "k8s.io/cloud-provider/api"
	servicecontroller "k8s.io/cloud-provider/controllers/service"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// ErrNodesSkipped marks an error naming Nodes that could not be made targets for a reason the
// user should see. The other Nodes were applied, and the skipped Nodes' own changes bring them
// in, so a caller need not retry.
var ErrNodesSkipped = errors.New("not load balancer targets")

// DefaultReadyGrace is how long a target may be not Ready before it loses traffic: long enough
// to ride out a kubelet restart and the node lifecycle controller's 50 s delay, short enough
// that a Node really gone does not black-hole its share for long.
const DefaultReadyGrace = time.Minute

// Health is the Node health rule.
type Health struct {
	// Enabled switches the Node's own health (Ready, Machine state, taints) on; off, only the
	// facts IronCore routes by apply.
	Enabled bool
	// ReadyGrace is how long a target's Ready condition may be False or Unknown before it counts.
	ReadyGrace time.Duration
}

// Why a Node is not a target; stable, used as a metric label.
const (
	KindNotInitialized   = "not-initialized"
	KindMachineGone      = "machine-gone"
	KindMachineDeleting  = "machine-deleting"
	KindNetworkInterface = "network-interface"
	KindDeleting         = "deleting"
	KindAutoscaler       = "autoscaler-deletion"
	KindShutdown         = "shutdown-taint"
	KindMachineState     = "machine-state"
	KindMachineStopped   = "machine-stopped"
	KindNotReady         = "not-ready"
	KindNeverReady       = "never-ready"
)

// Verdict is the outcome of the rule for one Node.
type Verdict struct {
	// Kind is one of the Kind constants; empty if the Node can serve.
	Kind string
	// Reason says why, for events and logs.
	Reason string
	// RecheckIn is, for a not-Ready target, how long until its grace period ends.
	RecheckIn time.Duration
}

// Healthy reports whether the verdict keeps the Node a target.
func (v Verdict) Healthy() bool { return v.Kind == "" }

// FailsOpen reports whether the Node may still be a target when no Node that could serve
// passes the rule.
func (v Verdict) FailsOpen() bool {
	switch v.Kind {
	case KindNotInitialized, KindMachineGone, KindMachineDeleting, KindNetworkInterface, KindDeleting, KindShutdown, KindMachineStopped:
		return false
	}
	return true
}

// Inputs is what the rule reads about one Node.
type Inputs struct {
	Node *corev1.Node
	// Machine is the Node's Machine; nil if it does not exist.
	Machine *computev1alpha1.Machine
	// NetworkInterfaces are the Machine's NetworkInterfaces on the cluster Network that exist.
	NetworkInterfaces []*networkingv1alpha1.NetworkInterface
	// Target tells whether the Node is a target now: only a target gets the Ready grace period,
	// so a Node that is not one becomes one only once Ready, however long it has existed.
	Target bool
}

// Check applies the rule to one Node at the time now.
func (h Health) Check(in Inputs, now time.Time) Verdict {
	node, machine := in.Node, in.Machine
	switch {
	case node.Spec.ProviderID == "":
		return Verdict{Kind: KindNotInitialized, Reason: "the Node is not initialized yet (no provider ID)"}
	case machine == nil:
		return Verdict{Kind: KindMachineGone, Reason: "its Machine does not exist"}
	case !machine.DeletionTimestamp.IsZero():
		return Verdict{Kind: KindMachineDeleting, Reason: fmt.Sprintf("its Machine %s is being deleted", machine.Name)}
	case len(ServingNetworkInterfaces(machine, in.NetworkInterfaces)) == 0:
		return Verdict{Kind: KindNetworkInterface, Reason: describeNetworkInterfaces(machine, in.NetworkInterfaces)}
	case !h.Enabled:
		return Verdict{}
	case !node.DeletionTimestamp.IsZero():
		return Verdict{Kind: KindDeleting, Reason: "the Node is being deleted"}
	case hasTaint(node, servicecontroller.ToBeDeletedTaint):
		return Verdict{Kind: KindAutoscaler, Reason: "the cluster autoscaler is deleting the Node (taint " + servicecontroller.ToBeDeletedTaint + ")"}
	case hasTaint(node, cloudproviderapi.TaintNodeShutdown):
		return Verdict{Kind: KindShutdown, Reason: "the Node is shut down (taint " + cloudproviderapi.TaintNodeShutdown + ")"}
	}
	switch state := machine.Status.State; state {
	case "", computev1alpha1.MachineStateRunning:
	case computev1alpha1.MachineStateShutdown, computev1alpha1.MachineStateTerminating, computev1alpha1.MachineStateTerminated:
		return Verdict{Kind: KindMachineStopped, Reason: fmt.Sprintf("its Machine %s is %s", machine.Name, state)}
	default:
		return Verdict{Kind: KindMachineState, Reason: fmt.Sprintf("its Machine %s is %s", machine.Name, state)}
	}
	return h.ready(node, in.Target, now)
}

// ReportsReady tells whether the Node has a Ready condition at all: a kubelet that has not
// reported one yet has never been Ready.
func ReportsReady(node *corev1.Node) bool {
	return slices.ContainsFunc(node.Status.Conditions, func(condition corev1.NodeCondition) bool { return condition.Type == corev1.NodeReady })
}

// ready applies the Ready part of the rule.
func (h Health) ready(node *corev1.Node, target bool, now time.Time) Verdict {
	var condition *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			condition = &node.Status.Conditions[i]
		}
	}
	switch {
	case condition != nil && condition.Status == corev1.ConditionTrue:
		return Verdict{}
	case condition == nil || !target:
		status := "not reported"
		if condition != nil {
			status = string(condition.Status)
		}
		return Verdict{Kind: KindNeverReady, Reason: fmt.Sprintf("it has not been Ready since it stopped being a target or joined (Ready: %s)", status)}
	}
	since := now.Sub(condition.LastTransitionTime.Time)
	if since < h.ReadyGrace {
		return Verdict{RecheckIn: h.ReadyGrace - since}
	}
	return Verdict{Kind: KindNotReady, Reason: fmt.Sprintf("its Ready condition has been %s for %s (grace period %s)",
		condition.Status, since.Round(time.Second), h.ReadyGrace)}
}

// ServingNetworkInterfaces returns the NetworkInterfaces of machine that traffic can be sent to.
// IronCore's own routing keeps only Available ones.
func ServingNetworkInterfaces(machine *computev1alpha1.Machine, nics []*networkingv1alpha1.NetworkInterface) []*networkingv1alpha1.NetworkInterface {
	var serving []*networkingv1alpha1.NetworkInterface
	for _, nic := range nics {
		if claimed(machine, nic) && ServesTraffic(nic) {
			serving = append(serving, nic)
		}
	}
	return serving
}

// ServesTraffic tells whether traffic can be sent to the NetworkInterface, whatever its Machine:
// it is not being deleted, Available and has an address.
func ServesTraffic(nic *networkingv1alpha1.NetworkInterface) bool {
	return nic.DeletionTimestamp.IsZero() && nic.Status.State == networkingv1alpha1.NetworkInterfaceStateAvailable && len(nic.Status.IPs) > 0
}

// ForeignNetworkInterface says why a Node with these NetworkInterfaces belongs to another
// cluster, or is "". Such a Node is never a target: traffic to it would leave the cluster.
func ForeignNetworkInterface(nics []*networkingv1alpha1.NetworkInterface, cluster string) string {
	for _, nic := range nics {
		if owner := nic.Labels[keys.LabelCluster]; owner != "" && owner != cluster {
			return fmt.Sprintf("NetworkInterface %s belongs to cluster %q", nic.Name, owner)
		}
	}
	return ""
}

// NodeChanged tells whether a Node changed in what the rules read of it, so that a heartbeat or
// a cordon alone triggers no sync.
func NodeChanged(old, node *corev1.Node) bool {
	if !old.DeletionTimestamp.Equal(node.DeletionTimestamp) || old.Spec.ProviderID != node.Spec.ProviderID ||
		old.Labels[corev1.LabelNodeExcludeBalancers] != node.Labels[corev1.LabelNodeExcludeBalancers] {
		return true
	}
	for _, key := range []string{servicecontroller.ToBeDeletedTaint, cloudproviderapi.TaintNodeShutdown} {
		if hasTaint(old, key) != hasTaint(node, key) {
			return true
		}
	}
	oldReady, ready := readyCondition(old), readyCondition(node)
	return oldReady.Status != ready.Status || !oldReady.LastTransitionTime.Equal(&ready.LastTransitionTime)
}

func readyCondition(node *corev1.Node) corev1.NodeCondition {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition
		}
	}
	return corev1.NodeCondition{}
}

// NetworkInterfaceChanged tells whether a NetworkInterface changed in what
// ServingNetworkInterfaces reads of it.
func NetworkInterfaceChanged(old, nic *networkingv1alpha1.NetworkInterface) bool {
	return !equality.Semantic.DeepEqual(old.Spec.MachineRef, nic.Spec.MachineRef) || !old.DeletionTimestamp.Equal(nic.DeletionTimestamp) ||
		old.Status.State != nic.Status.State || !slices.Equal(old.Status.IPs, nic.Status.IPs)
}

// claimed tells whether the NetworkInterface names the Machine as its claimer. IronCore releases
// the claim when the Machine goes, so a Machine's list alone is not enough.
func claimed(machine *computev1alpha1.Machine, nic *networkingv1alpha1.NetworkInterface) bool {
	ref := nic.Spec.MachineRef
	return machine != nil && ref != nil && ref.Name == machine.Name && (ref.UID == "" || ref.UID == machine.UID)
}

// describeNetworkInterfaces says why none of the Machine's NetworkInterfaces can serve.
func describeNetworkInterfaces(machine *computev1alpha1.Machine, nics []*networkingv1alpha1.NetworkInterface) string {
	if len(nics) == 0 {
		return "it has no NetworkInterface on the cluster Network"
	}
	nic := nics[0]
	switch {
	case !claimed(machine, nic):
		return fmt.Sprintf("its NetworkInterface %s is not attached to Machine %s", nic.Name, machine.Name)
	case !nic.DeletionTimestamp.IsZero():
		return fmt.Sprintf("its NetworkInterface %s is being deleted", nic.Name)
	case nic.Status.State != networkingv1alpha1.NetworkInterfaceStateAvailable:
		state := string(nic.Status.State)
		if state == "" {
			state = "not reported"
		}
		return fmt.Sprintf("its NetworkInterface %s is not Available (state: %s)", nic.Name, state)
	}
	return fmt.Sprintf("its NetworkInterface %s has no address yet", nic.Name)
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == key })
}

// NodesLeft tells whether a Node that had a serving endpoint in the EndpointSlice old has none in
// slice, its update: a Local Service's routing may have to leave it.
func NodesLeft(old, slice *discoveryv1.EndpointSlice) bool {
	now := ServingNodes([]*discoveryv1.EndpointSlice{slice})
	for node := range ServingNodes([]*discoveryv1.EndpointSlice{old}) {
		if !now[node] {
			return true
		}
	}
	return false
}

// ServingNodes names the Nodes with an endpoint serving the Service, as kube-proxy counts them
// for a Local Service. It reads the serving condition, which a terminating Pod keeps until it
// stops accepting connections, so a rolling update drains rather than cuts.
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

// serving applies the EndpointSlice API's defaults: no serving condition means ready, and no
// ready condition means true.
func serving(conditions discoveryv1.EndpointConditions) bool {
	if conditions.Serving != nil {
		return *conditions.Serving
	}
	return conditions.Ready == nil || *conditions.Ready
}

// Local reports whether the Service sends external traffic only to Nodes with a local endpoint.
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
	// Unhealthy are the Nodes the rule left out, with its verdicts; with FailedOpen, those that
	// fail open are targets all the same.
	Unhealthy map[string]Verdict
	// WithoutEndpoint are the Nodes a Local Service leaves out for having no serving endpoint.
	WithoutEndpoint []string
	// FailedOpen is set when every Node that could serve is unhealthy.
	FailedOpen bool
	// NoLocalEndpoints is set for a Local Service none of whose candidates has a serving
	// endpoint; it then targets every candidate, so that kube-proxy refuses its traffic rather
	// than the LoadBalancer dropping it, and the first endpoint is served with no routing change.
	NoLocalEndpoints bool
}

// Choose applies the rules to the candidates; the targets keep the candidates' order.
func Choose(candidates []Candidate, local bool, serving map[string]bool) Choice {
	// Sized for the usual case, where every candidate is a target.
	choice := Choice{Targets: make([]string, 0, len(candidates))}
	unhealthy := func(candidate Candidate) {
		if choice.Unhealthy == nil {
			choice.Unhealthy = map[string]Verdict{}
		}
		choice.Unhealthy[candidate.Node] = candidate.Verdict
	}
	pool := make([]Candidate, 0, len(candidates))
	for _, candidate := range candidates {
		if candidate.Verdict.FailsOpen() {
			pool = append(pool, candidate)
		} else {
			unhealthy(candidate)
		}
	}
	if local {
		var withEndpoint []Candidate
		for _, candidate := range pool {
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
		} else {
			unhealthy(candidate)
		}
	}
	if len(choice.Targets) == 0 && len(pool) > 0 {
		choice.FailedOpen = true
		for _, candidate := range pool {
			choice.Targets = append(choice.Targets, candidate.Node)
		}
	}
	return choice
}

// NotCandidate tells why the rules do not even choose among the Node, or "". With the health
// rule on, Nodes being deleted or tainted for deletion stay candidates the rule finds unhealthy,
// so that they are never the reason a load balancer has no targets.
func (h Health) NotCandidate(node *corev1.Node) string {
	switch {
	case Excluded(node):
		return "excluded by the label " + corev1.LabelNodeExcludeBalancers
	case !h.Enabled && !Eligible(node):
		return "being deleted or tainted for deletion (the service controller's rule)"
	}
	return ""
}

// Eligible reports whether the service controller passes the Node to load balancers (its
// stable node set predicates, k8s.io/cloud-provider v0.35).
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
