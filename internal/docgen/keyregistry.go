package docgen

import (
	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// Kind tells labels from annotations.
type Kind string

// The kinds of keys.
const (
	Label      Kind = "label"
	Annotation Kind = "annotation"
)

// Origin is who defined a key, which says whether it may be renamed: none of them may, except
// ours, and ours only with a migration.
type Origin string

// The origins of keys.
const (
	// OriginReference keys are the reference IronCore CCM's, kept so that either CCM works on
	// what the other wrote.
	OriginReference Origin = "reference CCM"
	// OriginOurs keys are this CCM's own, under Prefix.
	OriginOurs Origin = "this CCM"
	// OriginIronCore keys are defined by the IronCore API.
	OriginIronCore Origin = "IronCore"
	// OriginKubernetes keys are well-known Kubernetes keys that the upstream controllers in this
	// binary handle.
	OriginKubernetes Origin = "Kubernetes"
)

// The objects keys are found on.
const (
	OnService          = "Service"
	OnNode             = "Node"
	OnMachine          = "IronCore Machine"
	OnMachinePool      = "IronCore MachinePool"
	OnNetworkInterface = "IronCore NetworkInterface"
	OnLoadBalancer     = "IronCore LoadBalancer"
	OnPrefix           = "IronCore Prefix"
	OnRouting          = "IronCore LoadBalancerRouting"
)

// Key documents one label or annotation the CCM reads or writes.
type Key struct {
	Name   string
	Kind   Kind
	Origin Origin
	// On are the objects that carry the key.
	On []string
	// WrittenBy is who sets the key, ReadBy what reads it.
	WrittenBy, ReadBy string
	// Meaning is what the value means and what the CCM does with it.
	Meaning string
}

// AllKeys documents every label and annotation the CCM reads or writes, grouped by the object
// that carries them: first what users set, then what the CCM sets on Nodes, then IronCore.
func AllKeys() []Key {
	keys := []Key{
		{
			Name: keys.AnnotationInternalLoadBalancer, Kind: Annotation, Origin: OriginReference, On: []string{OnService},
			WrittenBy: "the Service's owner", ReadBy: "service-lb-controller",
			Meaning: "`\"true\"`: the Service gets an Internal IronCore LoadBalancer, with an address per IP family from the cloud-config's " +
				"`prefixName` (IPv4) and `ipv6PrefixName` (IPv6). `\"false\"` or no annotation: a Public one. Any other value is refused " +
				"(event `InvalidLoadBalancerAnnotation`) and the existing LoadBalancer is left as it is. Changing it replaces the " +
				"LoadBalancer, which gets new addresses.",
		},
		{
			Name: keys.AnnotationLoadBalancerIPs, Kind: Annotation, Origin: OriginOurs, On: []string{OnService},
			WrittenBy: "the Service's owner", ReadBy: "service-lb-controller",
			Meaning: "The addresses the Service's LoadBalancer should have, comma-separated, at most one per IP family of the Service, " +
				"for example `10.1.2.3,fd00::3`; it extends `spec.loadBalancerIP`, which holds only one. A LoadBalancer this cluster retained " +
				"(`" + keys.LabelRetained + "=true`) that holds exactly these addresses is taken over (event `LoadBalancerAdopted`). Otherwise an " +
				"Internal LoadBalancer is made with them, and a Public Service, which IronCore cannot give a chosen address, is refused " +
				"(event `LoadBalancerNotAdopted`) with no LoadBalancer made. `spec.loadBalancerIP` alone on a Public Service takes over a " +
				"retained LoadBalancer the same way, and is otherwise ignored (event `LoadBalancerIPIgnored`), as the reference CCM ignored it.",
		},
		{
			Name: keys.AnnotationLoadBalancerPrefix, Kind: Annotation, Origin: OriginOurs, On: []string{OnService},
			WrittenBy: "the Service's owner", ReadBy: "service-lb-controller",
			Meaning: "The IronCore Prefix (in the cluster's IronCore namespace) an Internal Service's IPv4 address is allocated from, " +
				"instead of the cloud-config's `prefixName`; `" + keys.AnnotationLoadBalancerIPv6Prefix + "` is the same for IPv6 and `ipv6PrefixName`. " +
				"A Prefix that does not exist or is of the other family is refused (event `InternalLoadBalancerPrefixMissing`) and no " +
				"LoadBalancer is made; a name that is not one is refused (event `InvalidLoadBalancerAnnotation`). It applies when the " +
				"LoadBalancer is made: an existing one keeps its addresses (event `LoadBalancerAddressKept`). On a Public Service, or for a " +
				"family the Service does not have, it is ignored with event `LoadBalancerPrefixIgnored`.",
		},
		{
			Name: keys.AnnotationLoadBalancerIPv6Prefix, Kind: Annotation, Origin: OriginOurs, On: []string{OnService},
			WrittenBy: "the Service's owner", ReadBy: "service-lb-controller",
			Meaning: "The IronCore Prefix an Internal Service's IPv6 address is allocated from, instead of the cloud-config's " +
				"`ipv6PrefixName`; see `" + keys.AnnotationLoadBalancerPrefix + "`.",
		},
		{
			Name: keys.AnnotationRetainLoadBalancer, Kind: Annotation, Origin: OriginOurs, On: []string{OnService},
			WrittenBy: "the Service's owner", ReadBy: "service-lb-controller",
			Meaning: "`\"true\"`: when the Service is deleted or stops being of type LoadBalancer, its IronCore LoadBalancer is kept with its " +
				"addresses instead of deleted (event `LoadBalancerRetained`): it records the Service no more, is marked `" + keys.LabelRetained + "`, " +
				"stops selecting targets, and its routing is emptied, so no Node gets its traffic. The orphan collector never deletes it; " +
				"deleting it on IronCore releases its addresses. `\"false\"` or no annotation: the LoadBalancer is deleted with the Service. " +
				"Any other value is refused (event `InvalidLoadBalancerAnnotation`) and the LoadBalancer is kept, as with `\"true\"`.",
		},
		{
			Name: keys.AnnotationLoadBalancerName, Kind: Annotation, Origin: OriginOurs, On: []string{OnService},
			WrittenBy: "the Service's owner", ReadBy: "service-lb-controller",
			Meaning: "The name of an IronCore LoadBalancer this cluster retained (`" + keys.LabelRetained + "=true`) for the Service to take over " +
				"with its addresses (event `LoadBalancerAdopted`); its ports and targets then follow the Service. A LoadBalancer that does " +
				"not exist, is not retained by this cluster (another Service's, another cluster's), is being deleted or is of the other type " +
				"(Public/Internal) is refused (event `LoadBalancerNotAdopted`), and no LoadBalancer is made until the annotation is fixed " +
				"or removed. Of two Services naming one, exactly one gets it. A Service that was retained from and is of type LoadBalancer " +
				"again takes its own back without the annotation.",
		},
		{
			Name: corev1.LabelNodeExcludeBalancers, Kind: Label, Origin: OriginKubernetes, On: []string{OnNode},
			WrittenBy: "the cluster operator", ReadBy: "service-lb-controller (upstream)",
			Meaning: "The Node receives no load balancer traffic: the service controller leaves it out of the Nodes it passes, " +
				"so its NetworkInterfaces are not load balancer targets.",
		},
		{
			Name: keys.LabelMachinePool, Kind: Label, Origin: OriginOurs, On: []string{OnNode},
			WrittenBy: "cloud-node-controller, at initialization", ReadBy: "users (selectors, scheduling)",
			Meaning: "The name of the IronCore MachinePool the Node's Machine runs on.",
		},
		{
			Name: corev1.LabelInstanceTypeStable, Kind: Label, Origin: OriginKubernetes, On: []string{OnNode},
			WrittenBy: "cloud-node-controller, at initialization", ReadBy: "users (selectors, scheduling)",
			Meaning: "The Machine's `spec.machineClassRef.name`. The controller also sets the deprecated `" + corev1.LabelInstanceType + "`.",
		},
		{
			Name: corev1.LabelTopologyZone, Kind: Label, Origin: OriginKubernetes, On: []string{OnNode},
			WrittenBy: "cloud-node-controller, at initialization", ReadBy: "users (selectors, scheduling)",
			Meaning: "The MachinePool's `" + string(commonv1alpha1.TopologyLabelZone) + "` label, or the MachinePool's name if it has none. " +
				"The controller also sets the deprecated `" + corev1.LabelFailureDomainBetaZone + "`.",
		},
		{
			Name: corev1.LabelTopologyRegion, Kind: Label, Origin: OriginKubernetes, On: []string{OnNode},
			WrittenBy: "cloud-node-controller, at initialization", ReadBy: "users (selectors, scheduling)",
			Meaning: "The MachinePool's `" + string(commonv1alpha1.TopologyLabelRegion) + "` label; not set if the MachinePool has none. " +
				"The controller also sets the deprecated `" + corev1.LabelFailureDomainBetaRegion + "`.",
		},
	}
	keys = append(keys, ironCoreKeys()...)
	return append(keys, ownershipKeys()...)
}

func ironCoreKeys() []Key {
	return []Key{
		{
			Name: string(commonv1alpha1.TopologyLabelZone), Kind: Label, Origin: OriginIronCore, On: []string{OnMachinePool},
			WrittenBy: "IronCore (the MachinePool's provider)", ReadBy: "cloud-node-controller",
			Meaning: "The zone of the Machines in the pool; becomes the Node's `" + corev1.LabelTopologyZone + "` label.",
		},
		{
			Name: string(commonv1alpha1.TopologyLabelRegion), Kind: Label, Origin: OriginIronCore, On: []string{OnMachinePool},
			WrittenBy: "IronCore (the MachinePool's provider)", ReadBy: "cloud-node-controller",
			Meaning: "The region of the Machines in the pool; becomes the Node's `" + corev1.LabelTopologyRegion + "` label.",
		},
		{
			Name: keys.LabelCluster, Kind: Label, Origin: OriginReference, On: []string{OnMachine, OnNetworkInterface},
			WrittenBy: "ironcore-cluster-label, once, if missing (or whoever creates the Machines)",
			ReadBy:    "node-route-controller, service-lb-controller",
			Meaning: "The name of the cluster whose Node runs on the Machine. Routes are listed from the NetworkInterfaces carrying it, " +
				"and load balancers select their targets by it. A value naming another cluster is never overwritten (the Node gets a " +
				"`ClusterLabelConflict` event), and a NetworkInterface labelled for another cluster gets neither routes nor load balancer traffic from this one.",
		},
		{
			Name: keys.LabelLoadBalancerTarget, Kind: Label, Origin: OriginOurs, On: []string{OnNetworkInterface},
			WrittenBy: "service-lb-controller, with `--use-nic-selector=true`", ReadBy: "IronCore, through the LoadBalancers' NetworkInterface selector",
			Meaning: "The cluster name, on exactly the cluster-Network NetworkInterfaces of the Nodes the service controller passes; " +
				"removed from all others. The cluster's LoadBalancers select NetworkInterfaces with this label and `" + keys.LabelCluster + "`, " +
				"so a removed, excluded or uninitialized Node receives no traffic.",
		},
		{
			Name: keys.AnnotationTargets, Kind: Annotation, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "service-lb-controller, with `--use-nic-selector=true`, while a LoadBalancer on the cluster Network does not select (a Local Service's)",
			ReadBy:    "nobody; writing it makes IronCore recompute the LoadBalancer's routing",
			Meaning: "A digest of the NetworkInterfaces that carry `" + keys.LabelLoadBalancerTarget + "`. IronCore v0.5.0 stops looking for the " +
				"LoadBalancers a NetworkInterface change concerns at the first LoadBalancer on its Network without a selector, so while one exists, " +
				"selecting LoadBalancers may miss target changes; the CCM writes the new digest on each of them when the targets change, and IronCore " +
				"then recomputes their routing.",
		},
		{
			Name: keys.LabelRetained, Kind: Label, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "service-lb-controller, when a Service annotated `" + keys.AnnotationRetainLoadBalancer + ": \"true\"` lets its LoadBalancer go",
			ReadBy:    "service-lb-controller, ironcore-load-balancer-orphans",
			Meaning: "`\"true\"`: the LoadBalancer was retained after its Service. It keeps this cluster's name and identity, so it stays provably " +
				"this cluster's, and records no Service. Its routing is kept empty. List them with " +
				"`kubectl get loadbalancers.networking.ironcore.dev -l " + keys.LabelRetained + "=true`.",
		},
		{
			Name: keys.AnnotationRetainedFrom, Kind: Annotation, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "service-lb-controller, with `" + keys.LabelRetained + "`", ReadBy: "people",
			Meaning: "The namespace/name of the Service the LoadBalancer was retained after. Unless `" + keys.AnnotationRetainedFor + "` says otherwise, " +
				"only Services of that namespace may take the LoadBalancer over.",
		},
		{
			Name: keys.LabelLoadBalancerPool, Kind: Label, Origin: OriginOurs, On: []string{OnPrefix},
			WrittenBy: "the platform team, on IronCore", ReadBy: "service-lb-controller",
			Meaning: "`\"true\"`: Internal Services may take their addresses from this Prefix by naming it in `" + keys.AnnotationLoadBalancerPrefix + "` or `" +
				keys.AnnotationLoadBalancerIPv6Prefix + "`. Any other Prefix is refused (`LoadBalancerPrefixNotGranted`), but the cloud-config's `prefixName` " +
				"and `ipv6PrefixName`, which every namespace may use; so is a Prefix another object controls or a single address, whatever its labels. " +
				"See docs/guides/address-grants.md.",
		},
		{
			Name: keys.AnnotationLoadBalancerPoolNamespaces, Kind: Annotation, Origin: OriginOurs, On: []string{OnPrefix},
			WrittenBy: "the platform team, on IronCore", ReadBy: "service-lb-controller",
			Meaning: "Comma-separated namespaces: only their Services may name this pool (`" + keys.LabelLoadBalancerPool + "`). Without it, every namespace may.",
		},
		{
			Name: keys.AnnotationRetainedFor, Kind: Annotation, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "the platform team, on IronCore (the CCM removes it when a Service takes the LoadBalancer over)", ReadBy: "service-lb-controller",
			Meaning: "A namespace: hands the retained LoadBalancer, with its addresses, to that namespace. Only its Services may take it over, " +
				"the namespace it was retained from included; remove the annotation to give it back. See docs/guides/address-grants.md.",
		},
		{
			Name: keys.LabelRetainRequested, Kind: Label, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "service-lb-controller, while the Service is annotated `" + keys.AnnotationRetainLoadBalancer + "` (removed with the annotation)",
			ReadBy:    "ironcore-load-balancer-orphans",
			Meaning: "`\"true\"`: the Service asks to retain the LoadBalancer. If the Service is gone without the CCM having seen it go " +
				"(its finalizer removed by hand while the CCM was down, its namespace force-deleted), the orphan collector retains the " +
				"LoadBalancer instead of deleting it.",
		},
		{
			Name: keys.AnnotationRetainedAt, Kind: Annotation, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "service-lb-controller, with `" + keys.LabelRetained + "`", ReadBy: "people",
			Meaning: "When the LoadBalancer was retained (RFC 3339, UTC).",
		},
		{
			Name: keys.LabelRoutingCluster, Kind: Label, Origin: OriginOurs, On: []string{OnRouting},
			WrittenBy: "service-lb-controller, on every LoadBalancerRouting it writes (all with `--use-nic-selector=false`, a Local Service's otherwise)",
			ReadBy:    "service-lb-controller",
			Meaning: "The cluster name. With `--use-nic-selector=true` IronCore writes the routings of selecting LoadBalancers, and the CCM " +
				"watches only the routings carrying this label with its cluster's name: a hand edit of one of them is written back within " +
				"seconds, while IronCore's rewrites of the others cost the CCM nothing.",
		},
		{
			Name: keys.LabelPodCIDR, Kind: Label, Origin: OriginOurs, On: []string{OnNetworkInterface, OnPrefix},
			WrittenBy: "ironcore-node-ipam, on the prefix template of each ephemeral `spec.prefixes` entry it adds (IronCore copies it onto the Prefix it allocates)",
			ReadBy:    "ironcore-node-ipam, node-route-controller",
			Meaning: "`IPv4` or `IPv6`: the entry holds a Node's pod CIDR of that family. Together with `" + keys.LabelCluster + "` (the cluster name) " +
				"on the same template, it makes the entry this cluster's: only such entries are allocated, listed as routes and released, " +
				"and a Prefix whose labels do not match its entry is not taken for its allocation.",
		},
		{
			Name: keys.AnnotationRoutes, Kind: Annotation, Origin: OriginOurs, On: []string{OnNetworkInterface},
			WrittenBy: "node-route-controller, in the same request as `spec.prefixes`", ReadBy: "node-route-controller",
			Meaning: "The pod CIDRs in the NetworkInterface's `spec.prefixes` that this CCM manages as routes, comma-separated. " +
				"Only these are listed as routes, so only these can be deleted; any other prefix is left alone, even inside `--cluster-cidr`.",
		},
	}
}

// ownershipKeys record which Service of which cluster an IronCore LoadBalancer was made for.
// Ownership is read from the label and, on LoadBalancers the reference CCM made, from the
// annotation.
func ownershipKeys() []Key {
	const readBy = "service-lb-controller, ironcore-load-balancer-orphans"
	owner := func(name string, kind Kind, origin Origin, what string) Key {
		writtenBy := "service-lb-controller"
		meaning := what + " of the Service the LoadBalancer was made for. A LoadBalancer is a Service's only if it records " +
			"the Service's UID and this cluster's name (or one of the cloud-config's `clusterNameAliases`, which the next " +
			"update replaces with the name); others are never changed or deleted."
		if kind == Annotation {
			writtenBy += " and the reference CCM"
			meaning += " The reference CCM's annotation, read when the label is missing."
		}
		return Key{Name: name, Kind: kind, Origin: origin, On: []string{OnLoadBalancer}, WrittenBy: writtenBy, ReadBy: readBy, Meaning: meaning}
	}
	return []Key{
		{
			Name: keys.LabelClusterID, Kind: Label, Origin: OriginOurs, On: []string{OnLoadBalancer},
			WrittenBy: "service-lb-controller, on every LoadBalancer it creates or adopts", ReadBy: "ironcore-load-balancer-orphans",
			Meaning: "The UID of the `kube-system` namespace of the cluster whose CCM manages the LoadBalancer: unlike the cluster " +
				"name, it is unique to one cluster. The orphan collector deletes a LoadBalancer only if it carries this cluster's " +
				"UID here and is on the cloud-config's Network; a LoadBalancer recording this cluster's name without it, or with " +
				"another cluster's UID, is logged and counted as `refused`, never deleted. Written once the CCM has read the UID " +
				"(at start), so a LoadBalancer applied before that gets it on its next update. Do not copy it to other objects.",
		},
		owner(keys.LabelClusterName, Label, OriginOurs, "The cluster name"),
		owner(keys.LabelServiceNamespace, Label, OriginOurs, "The namespace"),
		owner(keys.LabelServiceName, Label, OriginOurs, "The name"),
		owner(keys.LabelServiceUID, Label, OriginOurs, "The UID"),
		owner(keys.AnnotationClusterName, Annotation, OriginReference, "The cluster name"),
		owner(keys.AnnotationServiceNamespace, Annotation, OriginReference, "The namespace"),
		owner(keys.AnnotationServiceName, Annotation, OriginReference, "The name"),
		owner(keys.AnnotationServiceUID, Annotation, OriginReference, "The UID"),
	}
}
