package provider

import (
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// Reasons of the events the provider records on Services. They are stable: alerts and
// runbooks may match on them. docgen.EventReasons documents each. Those of the Problems package
// lbspec finds in a Service, and of the targets, are defined in those packages.
const (
	ReasonInvalidAnnotation     = lbspec.ReasonInvalidAnnotation
	ReasonInvalidLoadBalancerIP = lbspec.ReasonInvalidLoadBalancerIP
	ReasonUnsupportedPort       = lbspec.ReasonUnsupportedPort
	ReasonInternalPrefixMissing = lbspec.ReasonInternalPrefixMissing
	ReasonOwnershipConflict     = lbspec.ReasonOwnershipConflict
	ReasonNetworkChanged        = "LoadBalancerNetworkChanged"
	ReasonTypeChanged           = "LoadBalancerTypeChanged"
	ReasonSourceRangesOnNodes   = lbspec.ReasonSourceRangesOnNodes
	ReasonLoadBalancerIPIgnored = lbspec.ReasonLoadBalancerIPIgnored
	ReasonLoadBalancerIPKept    = lbspec.ReasonLoadBalancerIPKept
	ReasonPrefixIgnored         = lbspec.ReasonPrefixIgnored
	ReasonLoadBalancerRetained  = "LoadBalancerRetained"
	ReasonLoadBalancerAdopted   = "LoadBalancerAdopted"
	ReasonNotAdopted            = lbspec.ReasonNotAdopted
	ReasonPrefixNotGranted      = lbspec.ReasonPrefixNotGranted
	ReasonAddressUnavailable    = lbspec.ReasonAddressUnavailable
	ReasonTargetsIncomplete     = targetsapi.ReasonTargetsIncomplete
	ReasonTargetsFailedOpen     = targetsapi.ReasonTargetsFailedOpen
	ReasonNoLocalEndpoints      = targetsapi.ReasonNoLocalEndpoints
)
