package lbspec

// Reasons of the Problems this package finds. Package provider exports them under the same
// names, and docgen.EventReasons documents them; they are defined here, where they arise, so
// that the two cannot differ.
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

// Problem is something about a Service that its owner must know or fix. The provider records
// it as a Warning event on the Service with Reason and Message, and returns it to the
// framework when it stops the sync.
type Problem struct {
	Reason  string
	Message string
}

func (p *Problem) Error() string { return p.Message }
