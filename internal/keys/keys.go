// Package keys holds the label and annotation keys the CCM reads and writes. Keys shared with
// the reference IronCore CCM keep their names for compatibility; new keys carry our own prefix.
package keys

// Prefix is the domain of every label and annotation key this CCM introduces.
const Prefix = "cloud-provider.ironcore.dev/"

// Labels and annotations on IronCore Machines and NetworkInterfaces.
const (
	// LabelCluster marks the Machines and NetworkInterfaces that back this cluster's Nodes; its
	// value is the cluster name. Routes find NetworkInterfaces by it, and load balancers select
	// them by it. The key is the reference CCM's.
	LabelCluster = "kubernetes.io/cluster"
	// LabelLoadBalancerTarget marks the NetworkInterfaces that load balancers of the cluster named
	// by its value send traffic to: those of the Nodes the service controller currently picks.
	LabelLoadBalancerTarget = Prefix + "load-balancer-target"
	// AnnotationRoutes lists, comma-separated, the pod CIDRs in a NetworkInterface's
	// spec.prefixes that this CCM manages as routes. Other prefixes are never listed as routes,
	// so they are never deleted, even inside the cluster CIDR.
	AnnotationRoutes = Prefix + "routes"
)

// Labels on Nodes.
const (
	// LabelMachinePool is the name of the MachinePool the Node's Machine runs on.
	LabelMachinePool = Prefix + "machine-pool"
)

// Annotations on Services.
const (
	// AnnotationInternalLoadBalancer set to "true" asks for an Internal IronCore LoadBalancer
	// instead of a Public one; "false" or no annotation means Public. The key is the reference's.
	AnnotationInternalLoadBalancer = "service.beta.kubernetes.io/ironcore-load-balancer-internal"
	// AnnotationLoadBalancerIPs requests the addresses of an Internal LoadBalancer: a
	// comma-separated list with at most one IPv4 and one IPv6 address. It extends
	// spec.loadBalancerIP, which can only hold one address.
	AnnotationLoadBalancerIPs = Prefix + "load-balancer-ips"
)

// Ownership of IronCore LoadBalancers. The unprefixed annotations are the reference CCM's and
// are kept so that either CCM recognizes the other's LoadBalancers; the labels are ours and let
// the API server and caches select by owner.
const (
	AnnotationClusterName      = "cluster-name"
	AnnotationServiceName      = "service-name"
	AnnotationServiceNamespace = "service-namespace"
	AnnotationServiceUID       = "service-uid"

	LabelClusterName      = Prefix + "cluster-name"
	LabelServiceName      = Prefix + "service-name"
	LabelServiceNamespace = Prefix + "service-namespace"
	LabelServiceUID       = Prefix + "service-uid"
)
