package provider

import (
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// Reasons of the events the provider records on Services. They are stable: alerts and
// runbooks may match on them. docgen.EventReasons documents each. Those of the Problems package
// lbspec finds in a Service are defined there.
const (
	ReasonInvalidAnnotation     = lbspec.ReasonInvalidAnnotation
	ReasonInvalidLoadBalancerIP = lbspec.ReasonInvalidLoadBalancerIP
	ReasonUnsupportedPort       = lbspec.ReasonUnsupportedPort
	ReasonInternalPrefixMissing = lbspec.ReasonInternalPrefixMissing
	ReasonOwnershipConflict     = "LoadBalancerOwnershipConflict"
	ReasonNetworkChanged        = "LoadBalancerNetworkChanged"
	ReasonTypeChanged           = "LoadBalancerTypeChanged"
	ReasonSourceRangesOnNodes   = lbspec.ReasonSourceRangesOnNodes
	ReasonLoadBalancerIPIgnored = lbspec.ReasonLoadBalancerIPIgnored
	ReasonLoadBalancerIPKept    = lbspec.ReasonLoadBalancerIPKept
	ReasonTargetsIncomplete     = "LoadBalancerTargetsIncomplete"
	ReasonTargetsFailedOpen     = "LoadBalancerTargetsFailedOpen"
	ReasonNoLocalEndpoints      = "LoadBalancerNoLocalEndpoints"
)
