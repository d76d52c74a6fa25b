// Package keys holds the label and annotation keys the CCM reads and writes; package docgen
// documents each of them (docgen.AllKeys) in docs/reference/annotations.md. Keys shared with the
// reference IronCore CCM keep their names for compatibility; new keys carry our own prefix.
package keys

// Prefix is the domain of every label and annotation key this CCM introduces.
const Prefix = "cloud-provider.ironcore.dev/"

// Labels and annotations on IronCore Machines and NetworkInterfaces (see docgen.AllKeys).
const (
	// LabelCluster marks the Machines and NetworkInterfaces of this cluster's Nodes.
	LabelCluster = "kubernetes.io/cluster"
	// LabelLoadBalancerTarget marks the NetworkInterfaces load balancers send traffic to.
	LabelLoadBalancerTarget = Prefix + "load-balancer-target"
	// LabelPodCIDR marks the ephemeral prefix entries of NetworkInterfaces, and the Prefixes
	// IronCore allocates for them, that hold a Node's pod CIDR; its value is the IP family.
	LabelPodCIDR = Prefix + "pod-cidr"
	// AnnotationRoutes lists the pod CIDRs of a NetworkInterface that this CCM manages.
	AnnotationRoutes = Prefix + "routes"
	// AnnotationTargets is a digest of the NetworkInterfaces that carry the target label, on
	// the LoadBalancers that select them.
	AnnotationTargets = Prefix + "load-balancer-targets"
	// LabelRoutingCluster marks the LoadBalancerRoutings this CCM writes with its cluster's name.
	LabelRoutingCluster = Prefix + "routing-cluster"
)

// Marks the platform team sets on IronCore Prefixes to give Services addresses from them
// (see docgen.AllKeys).
const (
	// LabelLoadBalancerPool designates a Prefix as a pool Internal Services may name.
	LabelLoadBalancerPool = Prefix + "load-balancer-pool"
	// AnnotationLoadBalancerPoolNamespaces limits a pool to the namespaces it lists.
	AnnotationLoadBalancerPoolNamespaces = Prefix + "load-balancer-pool-namespaces"
)

// Labels on Nodes (see docgen.AllKeys).
const (
	// LabelMachinePool is the name of the MachinePool the Node's Machine runs on.
	LabelMachinePool = Prefix + "machine-pool"
)

// Annotations on Services (see docgen.AllKeys).
const (
	// AnnotationInternalLoadBalancer asks for an Internal IronCore LoadBalancer.
	AnnotationInternalLoadBalancer = "service.beta.kubernetes.io/ironcore-load-balancer-internal"
	// AnnotationLoadBalancerIPs requests the addresses of an Internal LoadBalancer.
	AnnotationLoadBalancerIPs = Prefix + "load-balancer-ips"
	// AnnotationRetainLoadBalancer keeps the Service's IronCore LoadBalancer, and its
	// addresses, when the Service is deleted or stops wanting one.
	AnnotationRetainLoadBalancer = Prefix + "retain-load-balancer"
	// AnnotationLoadBalancerName names a retained IronCore LoadBalancer for a new Service to
	// take over, with its addresses.
	AnnotationLoadBalancerName = Prefix + "load-balancer-name"
	// AnnotationLoadBalancerPrefix and AnnotationLoadBalancerIPv6Prefix name the IronCore
	// Prefixes an Internal Service's IPv4 and IPv6 addresses come from, instead of the
	// cloud-config's prefixName and ipv6PrefixName.
	AnnotationLoadBalancerPrefix     = Prefix + "load-balancer-prefix"
	AnnotationLoadBalancerIPv6Prefix = Prefix + "load-balancer-ipv6-prefix"
)

// Marks of an IronCore LoadBalancer retained after its Service (see docgen.AllKeys): it belongs to no
// Service, routes to no Node, and nothing but its own deletion or the retention period ends it.
const (
	LabelRetained          = Prefix + "retained"
	AnnotationRetainedFrom = Prefix + "retained-from"
	AnnotationRetainedAt   = Prefix + "retained-at"
	// AnnotationRetainedFor hands a retained LoadBalancer to another namespace: only that
	// namespace's Services may take it over. Only the platform team, on IronCore, sets it.
	AnnotationRetainedFor = Prefix + "retained-for"
	// LabelRetainRequested carries a Service's wish to retain its LoadBalancer onto the
	// LoadBalancer, so that it is kept even if the Service goes while the CCM does not see it.
	LabelRetainRequested = Prefix + "retain-requested"
)

// Ownership of IronCore LoadBalancers (see docgen.AllKeys). The unprefixed annotations are the reference
// CCM's and are kept so that either CCM recognizes the other's LoadBalancers; the labels are ours
// and let the API server and caches select by owner.
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

// LabelClusterID marks the IronCore LoadBalancers this CCM manages with the identity of its
// cluster, the UID of the kube-system namespace (see docgen.AllKeys). Unlike the cluster name, no two
// clusters share it, and only this CCM writes it, so the orphan collector deletes only what
// carries it.
const LabelClusterID = Prefix + "cluster-id"
