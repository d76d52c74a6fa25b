package inspect

import (
	corev1 "k8s.io/api/core/v1"
)

// Report is everything the inspection found. Its JSON form is the tool's --output=json; field
// names are stable, so scripts may rely on them.
type Report struct {
	// Cluster is the resolved cluster name, Namespace the IronCore namespace and Network the
	// cluster Network.
	Cluster   string `json:"cluster"`
	Namespace string `json:"ironcoreNamespace"`
	Network   string `json:"network"`

	Nodes     []Node     `json:"nodes"`
	Services  []Service  `json:"services"`
	Routes    []Route    `json:"routes"`
	Orphans   []Orphan   `json:"orphans"`
	Retained  []Retained `json:"retained"`
	Conflicts []Conflict `json:"conflicts"`
}

// Issue is one thing that differs from what the CCM would make of it, or stops the CCM.
// Code is a stable CamelCase word (see docs/inspect.md); Detail says it for people.
type Issue struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Issue codes of Nodes.
const (
	IssueNoProviderID         = "NoProviderID"
	IssueUninitialized        = "Uninitialized"
	IssueInvalidProviderID    = "InvalidProviderID"
	IssueMachineMissing       = "MachineMissing"
	IssueMachineLookupFailed  = "MachineLookupFailed"
	IssueMetadataNotAvailable = "MetadataNotAvailable"
	IssueMachineShutdown      = "MachineShutdown"
	IssueAddressesDiffer      = "AddressesDiffer"
	IssueZoneDiffers          = "ZoneDiffers"
	IssueNodeNotReady         = "NodeNotReady"
)

// Issue codes of Services.
const (
	IssueLoadBalancerMissing    = "LoadBalancerMissing"
	IssueOwnershipConflict      = "OwnershipConflict"
	IssueInvalidAnnotation      = "InvalidAnnotation"
	IssueTypeDiffers            = "TypeDiffers"
	IssueNetworkDiffers         = "NetworkDiffers"
	IssueLoadBalancerDeleting   = "LoadBalancerDeleting"
	IssueNoAddresses            = "NoAddresses"
	IssueServiceAddressesDiffer = "ServiceAddressesDiffer"
	IssueNoTargets              = "NoTargets"
	IssueRoutingStale           = "RoutingStale"
	IssueTargetsFailedOpen      = "TargetsFailedOpen"
	IssueNoLocalEndpoints       = "NoLocalEndpoints"
)

// Node is a Node and the Machine the CCM finds for it.
type Node struct {
	Name       string `json:"name"`
	ProviderID string `json:"providerID,omitempty"`
	// Machine is the Node's Machine, and MatchedBy how it was found: providerID, name or
	// hostname.
	Machine   string `json:"machine,omitempty"`
	MatchedBy string `json:"matchedBy,omitempty"`
	// MachinePool and Zone are where the Machine runs.
	MachinePool  string `json:"machinePool,omitempty"`
	Zone         string `json:"zone,omitempty"`
	MachineState string `json:"machineState,omitempty"`
	// NodeAddresses are the Node's status addresses; MachineAddresses those the CCM computes
	// from the Machine's NetworkInterfaces and would set.
	NodeAddresses    []corev1.NodeAddress `json:"nodeAddresses"`
	MachineAddresses []corev1.NodeAddress `json:"machineAddresses"`
	Issues           []Issue              `json:"issues"`
}

// Service is a Service of type LoadBalancer and its IronCore LoadBalancer.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// LoadBalancer is the name of the Service's IronCore LoadBalancer, if it has one.
	LoadBalancer string `json:"loadBalancer,omitempty"`
	// Type is the LoadBalancer's type, or the type the Service asks for if it has none.
	Type string `json:"type,omitempty"`
	// ServiceIPs are the Service's status ingress addresses; LoadBalancerIPs the
	// LoadBalancer's status IPs.
	ServiceIPs      []string `json:"serviceIPs"`
	LoadBalancerIPs []string `json:"loadBalancerIPs"`
	// TargetsFrom says where Targets come from: "selector" (the NetworkInterfaces matching
	// the LoadBalancer's networkInterfaceSelector) or "routing" (the destinations of the
	// LoadBalancerRouting the CCM wrote).
	TargetsFrom string   `json:"targetsFrom,omitempty"`
	Targets     []Target `json:"targets"`
	// LeftOut are the Nodes the CCM's target rules keep from being the LoadBalancer's targets,
	// and why.
	LeftOut []LeftOut `json:"leftOut"`
	// Owner is what the LoadBalancer records as its owner.
	Owner  *Owner  `json:"owner,omitempty"`
	Issues []Issue `json:"issues"`
}

// Target is one NetworkInterface a LoadBalancer sends traffic to.
type Target struct {
	NetworkInterface string   `json:"networkInterface"`
	Node             string   `json:"node,omitempty"`
	IPs              []string `json:"ips"`
	// Routed is whether the LoadBalancerRouting has a destination on it, which is what
	// IronCore actually programs.
	Routed bool `json:"routed"`
}

// LeftOut is a Node that is not a target of a Service's LoadBalancer, and why.
type LeftOut struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Owner is the cluster and Service an IronCore LoadBalancer records.
type Owner struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// Route states.
const (
	// RoutePresent: the pod CIDR is a managed prefix of the Node's NetworkInterface and
	// IronCore reports it.
	RoutePresent = "present"
	// RoutePending: the prefix is in the NetworkInterface's spec, not yet in its status.
	RoutePending = "pending"
	// RouteUnmanaged: the prefix is there, but not recorded as managed; the CCM takes it over
	// on its next pass.
	RouteUnmanaged = "unmanaged"
	// RouteMissing: the pod CIDR is not a prefix of the Node's NetworkInterface.
	RouteMissing = "missing"
	// RouteExtra: a prefix the CCM manages that is no pod CIDR of the Node (or has no Node).
	RouteExtra = "extra"
)

// Route is one pod CIDR of a Node, or one managed prefix that is not.
type Route struct {
	// Node is empty for a managed prefix on a Machine without a Node.
	Node             string `json:"node,omitempty"`
	NetworkInterface string `json:"networkInterface,omitempty"`
	CIDR             string `json:"cidr"`
	State            string `json:"state"`
	Detail           string `json:"detail,omitempty"`
}

// Orphan is a LoadBalancer of this cluster without a Service that wants it.
type Orphan struct {
	LoadBalancer string   `json:"loadBalancer"`
	Owner        Owner    `json:"owner"`
	IPs          []string `json:"ips"`
	Reason       string   `json:"reason"`
}

// Conflict is a LoadBalancer at a name this cluster would use for a Service, owned by another
// cluster or Service. The CCM leaves it alone and the Service gets no LoadBalancer.
type Conflict struct {
	LoadBalancer     string `json:"loadBalancer"`
	ServiceNamespace string `json:"serviceNamespace"`
	ServiceName      string `json:"serviceName"`
	ServiceUID       string `json:"serviceUID"`
	Owner            Owner  `json:"owner"`
}
