package provider

// Reasons of the events the provider records on Services. They are stable: alerts and
// runbooks may match on them.
const (
	// ReasonInvalidAnnotation: an annotation of ours has a value that cannot be used.
	ReasonInvalidAnnotation = "InvalidLoadBalancerAnnotation"
	// ReasonInvalidLoadBalancerIP: a requested load balancer address cannot be used.
	ReasonInvalidLoadBalancerIP = "InvalidLoadBalancerIP"
	// ReasonUnsupportedPort: a Service port has a protocol or number IronCore cannot serve.
	ReasonUnsupportedPort = "UnsupportedLoadBalancerPort"
	// ReasonInternalPrefixMissing: an Internal LoadBalancer needs an address of a family for
	// which the cloud-config names no Prefix.
	ReasonInternalPrefixMissing = "InternalLoadBalancerPrefixMissing"
	// ReasonOwnershipConflict: the IronCore LoadBalancer the Service would use belongs to
	// another cluster or Service; it is left alone.
	ReasonOwnershipConflict = "LoadBalancerOwnershipConflict"
	// ReasonNetworkChanged: the Service's LoadBalancer is on another Network than the
	// cloud-config names, and a LoadBalancer cannot move.
	ReasonNetworkChanged = "LoadBalancerNetworkChanged"
	// ReasonTypeChanged: the Service switched between Public and Internal; its LoadBalancer is
	// replaced and gets new addresses.
	ReasonTypeChanged = "LoadBalancerTypeChanged"
	// ReasonSourceRangesIgnored: IronCore LoadBalancers cannot filter clients by address.
	ReasonSourceRangesIgnored = "LoadBalancerSourceRangesIgnored"
	// ReasonLocalTrafficPolicyNotHonoured: IronCore LoadBalancers send traffic to every Node,
	// with or without a local endpoint.
	ReasonLocalTrafficPolicyNotHonoured = "ExternalTrafficPolicyLocalNotHonoured"
	// ReasonTargetsIncomplete: some Nodes could not be made load balancer targets.
	ReasonTargetsIncomplete = "LoadBalancerTargetsIncomplete"
)

// serviceError is a problem with a Service that its owner must fix; it is recorded as a
// Warning event with its reason and returned to the framework.
type serviceError struct {
	reason  string
	message string
}

func (e *serviceError) Error() string { return e.message }
