package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// How a Node's Machine was found (Node.MatchedBy).
const (
	MatchedByProviderID = "providerID"
	MatchedByName       = "name"
	MatchedByHostname   = "hostname"
)

// inspectNodes reports every Node with its Machine.
func (in *inspection) inspectNodes(ctx context.Context) []Node {
	nodes := make([]Node, 0, len(in.nodes))
	for i := range in.nodes {
		nodes = append(nodes, in.inspectNode(ctx, &in.nodes[i]))
	}
	return nodes
}

// inspectNode compares a Node with what the CCM makes of its Machine. Failures to look
// something up are reported as issues of the Node: they are what the CCM runs into too.
func (in *inspection) inspectNode(ctx context.Context, node *corev1.Node) Node {
	report := Node{
		Name:             node.Name,
		ProviderID:       node.Spec.ProviderID,
		NodeAddresses:    append([]corev1.NodeAddress{}, node.Status.Addresses...),
		MachineAddresses: []corev1.NodeAddress{},
		Issues:           []Issue{},
	}
	issue := func(code, format string, args ...any) {
		report.Issues = append(report.Issues, Issue{Code: code, Detail: fmt.Sprintf(format, args...)})
	}
	initialized := !hasTaint(node, cloudproviderapi.TaintExternalCloudProvider)
	if node.Spec.ProviderID == "" {
		issue(IssueNoProviderID, "the Node has no provider ID; the CCM sets it when it initializes the Node")
	}
	if !initialized {
		issue(IssueUninitialized, "the Node still has the taint %s: the CCM has not initialized it", cloudproviderapi.TaintExternalCloudProvider)
	}
	if !isReady(node) {
		issue(IssueNodeNotReady, "the Node is not Ready; if its Machine is gone, the CCM deletes it")
	}
	if _, notOurs := in.ironcore.MachineNamedBy(node); notOurs != "" {
		issue(IssueInvalidProviderID, "%s; the CCM does not guess another Machine", notOurs)
		return report
	}

	machine, err := in.view.MachineForNode(ctx, node)
	switch {
	case isNotFound(err) && node.Spec.ProviderID != "":
		issue(IssueMachineMissing, "%v; the CCM deletes the Node once it is not Ready", err)
		return report
	case isNotFound(err):
		issue(IssueMachineMissing, "no Machine is named %s or has guest hostname %s in %s; the CCM cannot initialize the Node", node.Name, node.Name, in.ironcore.Namespace())
		return report
	case err != nil:
		issue(IssueMachineLookupFailed, "%v", err)
		return report
	}
	report.Machine, report.MatchedBy = machine.Name, matchedBy(node, machine)
	report.MachineState = machineState(machine)
	if machine.Spec.MachinePoolRef != nil {
		report.MachinePool = machine.Spec.MachinePoolRef.Name
	}
	if provider.MachineIsShutdown(machine) {
		taint := "the Node does not have the shutdown taint (the CCM adds it while the Node is not Ready)"
		if hasTaint(node, cloudproviderapi.TaintNodeShutdown) {
			taint = "the Node has the shutdown taint"
		}
		issue(IssueMachineShutdown, "Machine %s is %s; %s", machine.Name, report.MachineState, taint)
	}

	metadata, err := in.view.InstanceMetadata(ctx, node)
	if err != nil {
		issue(IssueMetadataNotAvailable, "the CCM cannot describe the Node from its Machine: %v", err)
		return report
	}
	report.Zone = metadata.Zone
	report.MachineAddresses = append(report.MachineAddresses, metadata.NodeAddresses...)
	if !initialized {
		return report // the CCM sets addresses and zone when it initializes the Node
	}
	if !sameAddresses(node.Status.Addresses, metadata.NodeAddresses) {
		issue(IssueAddressesDiffer, "the Node has %s, the Machine's NetworkInterfaces say %s; the CCM updates the Node on its next node sync",
			formatAddresses(node.Status.Addresses), formatAddresses(metadata.NodeAddresses))
	}
	if zone := node.Labels[corev1.LabelTopologyZone]; metadata.Zone != "" && zone != metadata.Zone {
		issue(IssueZoneDiffers, "the Node is labelled %s=%q, but MachinePool %s is in zone %q; the CCM sets the zone only when it initializes a Node",
			corev1.LabelTopologyZone, zone, report.MachinePool, metadata.Zone)
	}
	return report
}

func matchedBy(node *corev1.Node, machine *computev1alpha1.Machine) string {
	switch {
	case node.Spec.ProviderID != "":
		return MatchedByProviderID
	case machine.Name == node.Name:
		return MatchedByName
	default:
		return MatchedByHostname
	}
}

func machineState(machine *computev1alpha1.Machine) string {
	state := string(machine.Status.State)
	if state == "" {
		state = "Unknown"
	}
	if machine.DeletionTimestamp != nil {
		state += " (being deleted)"
	}
	return state
}

func hasTaint(node *corev1.Node, key string) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return taint.Key == key })
}

func isReady(node *corev1.Node) bool {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sameAddresses compares address lists as sets: the order is the CCM's business, not a
// difference an operator needs to see.
func sameAddresses(a, b []corev1.NodeAddress) bool {
	set := func(addresses []corev1.NodeAddress) []string {
		keys := make([]string, 0, len(addresses))
		for _, address := range addresses {
			keys = append(keys, string(address.Type)+"="+address.Address)
		}
		slices.Sort(keys)
		return slices.Compact(keys)
	}
	return slices.Equal(set(a), set(b))
}

func formatAddresses(addresses []corev1.NodeAddress) string {
	if len(addresses) == 0 {
		return none
	}
	parts := make([]string, 0, len(addresses))
	for _, address := range addresses {
		parts = append(parts, string(address.Type)+"="+address.Address)
	}
	return strings.Join(parts, ",")
}
