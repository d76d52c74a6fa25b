package docgen

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterlabel"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// EventReason documents one reason of the events the CCM records. docs/events.md is generated
// from EventReasons, and a test checks that the code records exactly these reasons, each with
// its type.
type EventReason struct {
	Reason string
	// Type is corev1.EventTypeNormal or corev1.EventTypeWarning.
	Type string
	// Object is the kind of object the event is recorded on.
	Object string
	// Controller is the controller (as named in --controllers) that records it.
	Controller string
	// When says what causes the event and what the CCM does about it.
	When string
	// Action says what the user should do.
	Action string
}

// EventReasons documents every event reason the CCM records, the provider's and its
// controllers', so that users find them in one catalogue.
func EventReasons() []EventReason {
	const serviceLB = "service-lb-controller"
	internalKey, ipsKey, clusterKey := "`"+keys.AnnotationInternalLoadBalancer+"`", "`"+keys.AnnotationLoadBalancerIPs+"`", "`"+keys.LabelCluster+"`"
	warning := func(reason, when, action string) EventReason {
		return EventReason{Reason: reason, Type: corev1.EventTypeWarning, Object: "Service", Controller: serviceLB, When: when, Action: action}
	}
	return []EventReason{
		warning(provider.ReasonInvalidAnnotation,
			"The Service's "+internalKey+" annotation is neither `\"true\"` nor `\"false\"`. "+
				"The sync fails and the existing LoadBalancer is left as it is.",
			"Set the annotation to `\"true\"` (Internal) or `\"false\"` (Public), or remove it (Public)."),
		warning(provider.ReasonInvalidLoadBalancerIP,
			"A requested address (`spec.loadBalancerIP` or the "+ipsKey+" annotation) is not an IP address, "+
				"is of an IP family the Service does not have, or is one of two for the same family. The sync fails.",
			"Request at most one address per IP family of the Service; or remove the request."),
		warning(provider.ReasonUnsupportedPort,
			"A Service port has a protocol other than TCP, UDP or SCTP, or a number outside 1-65535. The sync fails; the message names each port.",
			"Change or remove the named ports."),
		warning(provider.ReasonInternalPrefixMissing,
			"An Internal LoadBalancer needs an address of an IP family for which the Service requests none and neither the Service ("+
				"`"+keys.AnnotationLoadBalancerPrefix+"`, `"+keys.AnnotationLoadBalancerIPv6Prefix+"`) nor the cloud-config "+
				"(`prefixName`, `ipv6PrefixName`) names a Prefix; or the Prefix the Service names does not exist or is of the other IP family. "+
				"The sync fails and no LoadBalancer is made.",
			"Request the address with the "+ipsKey+" annotation, name an existing Prefix of the family, or ask the cluster operator to set the Prefix in the cloud-config."),
		warning(provider.ReasonPrefixNotGranted,
			"The Prefix an Internal Service names (`"+keys.AnnotationLoadBalancerPrefix+"`, `"+keys.AnnotationLoadBalancerIPv6Prefix+"`) is not a pool "+
				"the platform team gave the Service's namespace: it lacks `"+keys.LabelLoadBalancerPool+"=true`, its `"+keys.AnnotationLoadBalancerPoolNamespaces+
				"` does not list the namespace, another object controls it (a NetworkInterface's pod CIDR, a LoadBalancer's address) or it is a single address. "+
				"The sync fails and no LoadBalancer is made; an existing LoadBalancer keeps its address.",
			"Name a pool given to the namespace, remove the annotation to use the cloud-config's Prefix, or ask the platform team to designate "+
				"the Prefix (see docs/guides/address-grants.md)."),
		warning(provider.ReasonAddressUnavailable,
			"An Internal Service asks ("+ipsKey+", `spec.loadBalancerIP`) for an address that is not in the Prefix it would be allocated from "+
				"(the one the Service names, else the cloud-config's), is already allocated from it, or is held by another LoadBalancer. "+
				"Requested addresses are allocated through IronCore's IPAM, so no two objects hold one. The sync fails and no LoadBalancer is made.",
			"Request a free address of a Prefix given to the namespace, or none to get any."),
		warning(provider.ReasonOwnershipConflict,
			"The IronCore LoadBalancer under the Service's name, or under the name the reference CCM used, belongs to another cluster or Service. "+
				"It is never changed or deleted: syncing the Service fails, and deleting it leaves that LoadBalancer alone.",
			"Find out who owns the IronCore LoadBalancer the message names. If nobody does any more, delete it; the Service gets its own on the next sync."),
		warning(provider.ReasonNetworkChanged,
			"The Service's IronCore LoadBalancer is on another Network than the cloud-config's `networkName`, and a LoadBalancer cannot move. "+
				"It is left as it is and the sync fails.",
			"Restore `networkName`, or, if the move is intended, re-create the Service: it gets a new LoadBalancer, with new addresses, on the new Network."),
		{
			Reason: provider.ReasonTypeChanged, Type: corev1.EventTypeNormal, Object: "Service", Controller: serviceLB,
			When: "The Service switched between Public and Internal. A LoadBalancer of the new type is created beside the old one, which " +
				"keeps serving the Service's addresses until the new one has its own and its routing a destination; then the Service's status " +
				"switches to the new addresses in one update, and the old LoadBalancer is deleted.",
			Action: "Nothing, if the switch is intended; clients must use the new addresses.",
		},
		warning(provider.ReasonSourceRangesOnNodes,
			"The Service sets `spec.loadBalancerSourceRanges`. IronCore LoadBalancers do not filter clients, but they are L3: "+
				"packets reach the Nodes with the client's address and the load balancer address, and kube-proxy drops those from "+
				"outside the ranges (the Service's ingress has `ipMode: VIP`, so kube-proxy handles the address). "+
				"Recorded once per change of the Service.",
			"Nothing with kube-proxy. With a kube-proxy replacement, check that it enforces `loadBalancerSourceRanges`."),
		warning(provider.ReasonLoadBalancerIPIgnored,
			"A Public Service sets `spec.loadBalancerIP` (or the "+ipsKey+" annotation) that its LoadBalancer does not hold, and no LoadBalancer "+
				"this cluster retained holds it to be taken over. IronCore chooses the addresses of new Public LoadBalancers, so it is ignored, "+
				"as the reference CCM ignored it; the LoadBalancer is made. Recorded once per change of the Service.",
			"Remove the field, ask for the address of a retained LoadBalancer, or make the LoadBalancer Internal ("+internalKey+": `\"true\"`) to request its address."),
		warning(provider.ReasonLoadBalancerIPKept,
			"The Service requests an address (`spec.loadBalancerIP` or the "+ipsKey+" annotation) that its existing Internal LoadBalancer "+
				"does not have, or names a Prefix (`"+keys.AnnotationLoadBalancerPrefix+"`) other than the one its address came from. The LoadBalancer keeps its addresses: changing them would cut its clients off. Recorded once per change of the Service.",
			"Keep the request equal to the current address, or re-create the Service to get a LoadBalancer with the requested address."),
		warning(provider.ReasonPrefixIgnored,
			"The Service names a Prefix for its addresses (`"+keys.AnnotationLoadBalancerPrefix+"`, `"+keys.AnnotationLoadBalancerIPv6Prefix+"`) "+
				"that does not apply: the Service is Public, whose addresses IronCore chooses, or lacks the annotation's IP family. "+
				"The LoadBalancer is made as without it. Recorded once per change of the Service.",
			"Remove the annotation, or make the LoadBalancer Internal ("+internalKey+": `\"true\"`)."),
		warning(provider.ReasonTargetsIncomplete,
			"Some Nodes could not be made load balancer targets: their Machine "+
				"has a NetworkInterface of another cluster on the cluster Network. The other Nodes are applied and the missing ones retried; the message names each Node. "+
				"Recorded when the list changes. Nodes of another provider or IronCore namespace are left out quietly (logged once).",
			"Usually nothing: a starting Node resolves itself. If it persists, check the named Node's Machine and NetworkInterfaces on IronCore."),
		warning(provider.ReasonTargetsFailedOpen,
			"Every Node that could serve the Service is unhealthy by the Node health rule (`--load-balancer-node-health`): its Machine is not Running, "+
				"its Ready condition is not True (past the grace period for a target), it is tainted as shut down or for deletion by the cluster autoscaler, "+
				"or it is being deleted. The rule fails open: the Nodes that may still serve (not Ready, a Machine not Running yet, the autoscaler's taint) "+
				"stay targets, since leaving none would serve no one; a Node that certainly cannot serve never does (its Machine gone, being deleted, "+
				"shut down or terminated; no Available NetworkInterface with an address; being deleted or tainted as shut down). "+
				"The message names the Nodes and why. Recorded when that changes.",
			"Check the named Nodes and their Machines; the targets follow as soon as a Node is healthy again."),
		warning(provider.ReasonNotAdopted,
			"The Service's `"+keys.AnnotationLoadBalancerName+"` annotation names an IronCore LoadBalancer it cannot take over: it does not exist, "+
				"is not retained by this cluster, is retained for another namespace, does not carry this cluster's identity, is being deleted, "+
				"or is of the other type (Public/Internal); or the CCM does not know its cluster's identity yet (it takes nothing over until it does); "+
				"or a Public Service's "+ipsKey+" annotation asks for addresses no LoadBalancer this cluster retained holds; or an Internal Service "+
				"asks for an address a retained LoadBalancer it cannot take over holds. Nothing is changed and no other "+
				"LoadBalancer is made for the Service; the message says which (without naming another namespace). A Public Service asking with "+
				"`spec.loadBalancerIP` alone gets a new LoadBalancer of IronCore's choosing instead, and this event. On a Service that has a "+
				"LoadBalancer already, a `"+keys.AnnotationLoadBalancerName+"` naming another is recorded once per change and changes nothing.",
			"Name a LoadBalancer this cluster retained for the Service's namespace (`kubectl get loadbalancers.networking.ironcore.dev -l "+keys.LabelRetained+"=true` on IronCore), "+
				"match its type, ask the platform team to hand it to the namespace (`"+keys.AnnotationRetainedFor+"`), or remove the annotation to get a new LoadBalancer."),
		{
			Reason: provider.ReasonLoadBalancerAdopted, Type: corev1.EventTypeNormal, Object: "Service", Controller: serviceLB,
			When:   "The Service took over an IronCore LoadBalancer this cluster retained, with its addresses, which the message names.",
			Action: "Nothing.",
		},
		{
			Reason: provider.ReasonLoadBalancerRetained, Type: corev1.EventTypeNormal, Object: "Service", Controller: serviceLB,
			When: "The Service, annotated `" + keys.AnnotationRetainLoadBalancer + ": \"true\"`, was deleted or stopped being of type " +
				"LoadBalancer: its IronCore LoadBalancer is kept with its addresses, which the message names, routing to no Node.",
			Action: "Nothing to keep it. To release its addresses, delete the LoadBalancer on IronCore.",
		},
		{
			Reason: provider.ReasonNoLocalEndpoints, Type: corev1.EventTypeNormal, Object: "Service", Controller: serviceLB,
			When: "The Service has `externalTrafficPolicy: Local` and no serving endpoint on a Node that can be a target (scaled to zero, " +
				"or no Pod ready yet). Its load balancer then targets every healthy Node, as a Cluster Service does: kube-proxy refuses the " +
				"connections there, so clients fail fast, and the first endpoint to serve gets traffic at once. Recorded when that changes.",
			Action: "Nothing, if the Service is scaled to zero on purpose; otherwise check why its Pods are not ready.",
		},
		{
			Reason: lbtargets.ReasonDriftRepaired, Type: corev1.EventTypeNormal, Object: "Service, Node", Controller: lbtargets.Name,
			When: "Load balancer targets were changed outside the CCM, and the CCM put them back at once: on a Service, its " +
				"LoadBalancerRouting (written by the CCM with `--use-nic-selector=false` or for a Local Service) was edited; on a Node, the target label " +
				"`" + keys.LabelLoadBalancerTarget + "` was removed from its NetworkInterface while it is a target, or put there while it is not. " +
				"`ironcore_ccm_load_balancer_target_drift_repaired_total` counts them by kind.",
			Action: "Find out who changes IronCore objects the CCM owns; edits there do not last.",
		},
		{
			Reason: lbrepair.ReasonRecreated, Type: corev1.EventTypeWarning, Object: "Service", Controller: lbrepair.Name,
			When: "The Service's IronCore LoadBalancer was deleted by someone other than the CCM while the Service still had addresses. " +
				"The CCM creates a new one at once and writes its addresses into the Service's status; a Public LoadBalancer gets a new address " +
				"(IronCore chooses it), an Internal one with a requested address gets that address again.",
			Action: "Find out who deleted it. Clients of a Public LoadBalancer must use the new address (update DNS).",
		},
		{
			Reason: lbrepair.ReasonAddressPending, Type: corev1.EventTypeWarning, Object: "Service", Controller: lbrepair.Name,
			When: "IronCore has not allocated all addresses of the Service's LoadBalancer a minute after the CCM first saw it waiting " +
				"(IronCore usually takes seconds). The CCM writes them into the Service's status as soon as IronCore allocates them; recorded once.",
			Action: "Check the LoadBalancer on IronCore (`kubectl get loadbalancers` on the IronCore API) and the component that allocates its " +
				"addresses (apinetlet): a Public LoadBalancer needs a free public address, an Internal one a free address in its Prefix.",
		},
		{
			Reason: lbtargets.ReasonTargetExcluded, Type: corev1.EventTypeWarning, Object: "Node", Controller: lbtargets.Name,
			When: "The target rules found that the Node cannot serve: its Machine is gone, being deleted or not Running, none of its " +
				"NetworkInterfaces on the cluster Network is attached to it, not being deleted, and Available with an address, its Ready condition has been False or Unknown longer than " +
				"`--load-balancer-unready-grace-period`, it is tainted as shut down or for deletion by the cluster autoscaler, or it is being deleted; " +
				"the message says which. Its NetworkInterfaces stop being load balancer targets, unless no Node that could serve a Service is healthy " +
				"(then the Service gets `" + provider.ReasonTargetsFailedOpen + "`; a Node whose Machine is gone, being deleted or stopped, whose NetworkInterface cannot serve, " +
				"or that is being deleted or tainted as shut down stays out even then). " +
				"Recorded when the reason changes; not for a Node that has not served yet (not initialized, never Ready), which joins once Ready.",
			Action: "Nothing, if the Node is being drained or removed. Otherwise find out why it is unhealthy; it gets traffic again when it is healthy.",
		},
		{
			Reason: nodeipam.ReasonAllocated, Type: corev1.EventTypeNormal, Object: "Node", Controller: nodeipam.Name,
			When:   "IronCore allocated the Node's pod CIDRs (one per configured family) as ephemeral prefixes of its NetworkInterface, and the CCM set `spec.podCIDRs`.",
			Action: "Nothing.",
		},
		{
			Reason: nodeipam.ReasonFailed, Type: corev1.EventTypeWarning, Object: "Node", Controller: nodeipam.Name,
			When: "The Node has waited 10 s for its pod CIDRs and the CCM found why: a parent Prefix is full (no free range of the mask size), " +
				"missing, or no longer of its family, or the Node's Machine or NetworkInterface cannot be found. The Node keeps no pod CIDRs; " +
				"the allocation goes on by itself once the cause is gone. Recorded once per wait.",
			Action: "Free space in the parent (delete unused Nodes), or add a Prefix with the parent labels (`podCIDRParentPrefixLabels`), " +
				"or fix what the message names.",
		},
		{
			Reason: nodeipam.ReasonFromElsewhere, Type: corev1.EventTypeWarning, Object: "Node", Controller: nodeipam.Name,
			When: "A Node created while pod CIDR allocation from IronCore is on got `spec.podCIDRs` from another allocator. It keeps them, " +
				"and entries already added to its NetworkInterface for it are released.",
			Action: "Run one allocator: set kube-controller-manager's `--allocate-node-cidrs=false` (see docs/guides/pod-cidrs-from-ironcore.md).",
		},
		{
			Reason: nodeipam.ReasonMachineShared, Type: corev1.EventTypeWarning, Object: "Node", Controller: nodeipam.Name,
			When: "Pod CIDR allocation from IronCore is on, and another Node runs on (or, by an ambiguous hostname, may run on) the same Machine " +
				"and holds its pod CIDRs or was created first. A NetworkInterface's pod CIDR entries are one Node's, so this Node gets none; " +
				"the allocation goes on by itself once the other Node is gone. Recorded once per wait.",
			Action: "Delete the Node that does not run on the Machine, or give the Machines distinct hostnames.",
		},
		{
			Reason: nodeipam.ReasonHeldElsewhere, Type: corev1.EventTypeWarning, Object: "Node", Controller: nodeipam.Name,
			When: "Pod CIDR allocation from IronCore is on, and IronCore allocated this Node a range that another Node of the cluster still has: " +
				"IronCore gives a range back as soon as the NetworkInterface that held it is gone, which is before the Node of that Machine is deleted. " +
				"This Node gets no pod CIDRs until the other Node is deleted. Recorded once per wait.",
			Action: "Nothing, if the other Node's Machine is gone: the CCM deletes that Node once it is not Ready. If it stays Ready, find out what still runs as it, and delete it.",
		},
		{
			Reason: lbtargets.ReasonTargetRestored, Type: corev1.EventTypeNormal, Object: "Node", Controller: lbtargets.Name,
			When:   "A Node the health rule had found unhealthy is healthy again; its NetworkInterfaces are load balancer targets again.",
			Action: "Nothing.",
		},
		{
			Reason: clusterlabel.ReasonLabelConflict, Type: corev1.EventTypeWarning, Object: "Node", Controller: clusterlabel.Name,
			When: "The Node's Machine or one of its NetworkInterfaces has a " + clusterKey + " label naming another cluster. " +
				"The label is not overwritten, and such a NetworkInterface gets no routes or load balancer traffic from this cluster.",
			Action: "Check that the Node belongs to this cluster and that the cloud-config's `clusterName` is right; if the label is stale, correct it on IronCore.",
		},
		{
			Reason: provider.ReasonMachinePoolLabelSkipped, Type: corev1.EventTypeWarning, Object: "Node", Controller: "cloud-node-controller",
			When: "The name of the Node's MachinePool is not a valid label value (for example longer than 63 characters), so the Node does not get the `" +
				keys.LabelMachinePool + "` label. The Node is initialized all the same; the event repeats whenever the Node's metadata is read.",
			Action: "Nothing is needed. To get the label, run the Machines on MachinePools whose names are at most 63 characters.",
		},
	}
}
