package lbspec

// Reasons of the Problems this package finds; package provider exports them under the same
// names, and docgen.EventReasons documents them.
const (
	ReasonInvalidAnnotation     = "InvalidLoadBalancerAnnotation"
	ReasonInvalidLoadBalancerIP = "InvalidLoadBalancerIP"
	ReasonUnsupportedPort       = "UnsupportedLoadBalancerPort"
	ReasonInternalPrefixMissing = "InternalLoadBalancerPrefixMissing"
	ReasonSourceRangesOnNodes   = "LoadBalancerSourceRangesEnforcedOnNodes"
	ReasonLoadBalancerIPIgnored = "LoadBalancerIPIgnored"
	ReasonLoadBalancerIPKept    = "LoadBalancerAddressKept"
	ReasonNotAdopted            = "LoadBalancerNotAdopted"
	ReasonOwnershipConflict     = "LoadBalancerOwnershipConflict"
	ReasonPrefixNotGranted      = "LoadBalancerPrefixNotGranted"
	ReasonAddressUnavailable    = "LoadBalancerAddressUnavailable"
)

// Problem is something about a Service that its owner must know or fix: the provider records it
// as a Warning event on the Service, and returns it when it stops the sync.
type Problem struct {
	Reason  string
	Message string
}

func (p *Problem) Error() string { return p.Message }
