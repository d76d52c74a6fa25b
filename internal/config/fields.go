package config

import (
	"reflect"
	"strings"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// Field documents one key of the cloud-config file. docs/reference/cloud-config.md is generated
// from Fields, and a test checks that they match CloudConfig key for key.
type Field struct {
	Key string
	// Type is the YAML type, as the strict decoder reports it ("string", "list of strings").
	Type string
	// Required is "yes", "no", or the condition under which the key is required.
	Required string
	// Default is what an absent key means.
	Default string
	// Example is a value for the example file.
	Example string
	// InsteadOf is the key this one is an alternative to; the example file shows it commented out.
	InsteadOf   string
	Description string
}

// Fields documents the cloud-config keys, in the order of CloudConfig.
func Fields() []Field {
	fields := []Field{
		{
			Key: "networkName", Required: "yes", Default: "none", Example: "my-network",
			Description: "The IronCore Network the cluster's Machines are attached to. Load balancers are created on it, and routes and " +
				"load balancer targets use the Machines' NetworkInterfaces on it. An object name (DNS-1123 subdomain) in the " +
				"IronCore namespace; the CCM checks at start that it exists.",
		},
		{
			Key: "prefixName", Required: "no", Default: "none: an Internal LoadBalancer's IPv4 address must then be requested", Example: "my-prefix",
			Description: "The IronCore Prefix that the IPv4 addresses of Internal LoadBalancers are allocated from. Without it, an " +
				"Internal LoadBalancer needing an IPv4 address that the Service does not request gets the event " +
				"`InternalLoadBalancerPrefixMissing`. The CCM checks at start that it exists and is IPv4.",
		},
		{
			Key: "ipv6PrefixName", Required: "no", Default: "none: an Internal LoadBalancer's IPv6 address must then be requested", Example: "my-v6-prefix",
			Description: "The same as `prefixName`, for IPv6 addresses. Not known to the reference CCM, which gave Internal " +
				"LoadBalancers IPv4 addresses only.",
		},
		{
			Key: "clusterName", Required: "unless `--cluster-name` is set", Default: "`--cluster-name`, if set explicitly", Example: "my-cluster",
			Description: "This cluster's name on IronCore objects: the `" + keys.LabelCluster + "` label on Machines and " +
				"NetworkInterfaces, and the owner of LoadBalancers. It is the source of truth, because the reference CCM " +
				"labelled IronCore objects with it; a `--cluster-name` that differs stops the CCM (remove it, and put its value " +
				"into `clusterNameAliases`). A valid label value. Avoid `kubernetes`, Kubernetes' default `--cluster-name`: " +
				"other clusters may well have it too, so with it the orphan collector only reports.",
		},
		{
			Key: "clusterNameAliases", Required: "no", Default: "none", Example: "[old-cluster-name]",
			Description: "Earlier names of this cluster, as recorded on IronCore LoadBalancers. A reference CCM run with a " +
				"`--cluster-name` other than its `clusterName` labelled Machines and NetworkInterfaces with `clusterName` but " +
				"recorded `--cluster-name` on LoadBalancers (annotation `" + keys.AnnotationClusterName + "`); list that name here. " +
				"A LoadBalancer recording an alias and a Service's UID is that Service's and is adopted in place: its next " +
				"update records the current name. Without the alias, such a LoadBalancer is an ownership conflict and left alone. " +
				"The orphan collector deletes no LoadBalancer just for recording an alias: like any, it must carry this cluster's `" +
				keys.LabelClusterID + "` label, which this CCM writes when it adopts one.",
		},
		{
			Key: "podCIDRParentPrefix", Required: "no", Default: "none: IPv4 pod CIDRs are not allocated by this CCM", Example: "my-pod-prefix",
			Description: "Turns on pod CIDR allocation from IronCore's IPAM for IPv4, the alternative to kube-controller-manager's " +
				"`--allocate-node-cidrs` (see docs/guides/pod-cidrs-from-ironcore.md): the IronCore Prefix each Node's IPv4 pod CIDR " +
				"is allocated from, as an ephemeral prefix of the Node's NetworkInterface on the cluster Network, which routes the " +
				"range to the Node. The CCM checks at start that it exists, is IPv4 and is larger than `podCIDRMaskSize`.",
		},
		{
			Key: "podCIDRParentPrefixLabels", Required: "no", Default: "none", Example: "{pod-cidrs: my-cluster}", InsteadOf: "podCIDRParentPrefix",
			Description: "Instead of `podCIDRParentPrefix`: labels that select the IPv4 parent Prefixes. IronCore allocates from any " +
				"of them that has room, so a full range is extended by creating another Prefix with these labels. The CCM checks at " +
				"start that at least one IPv4 Prefix has them.",
		},
		{
			Key: "podCIDRMaskSize", Required: "no", Default: "24", Example: "24",
			Description: "The prefix length of each Node's IPv4 pod CIDR. Used only with `podCIDRParentPrefix` or `podCIDRParentPrefixLabels`.",
		},
		{
			Key: "ipv6PodCIDRParentPrefix", Required: "no", Default: "none: IPv6 pod CIDRs are not allocated by this CCM", Example: "my-v6-pod-prefix",
			Description: "The same as `podCIDRParentPrefix`, for IPv6. With both families set, Nodes are dual-stack: `spec.podCIDRs` " +
				"lists the IPv4 CIDR first; with only this one, IPv6-only.",
		},
		{
			Key: "ipv6PodCIDRParentPrefixLabels", Required: "no", Default: "none", Example: "{v6-pod-cidrs: my-cluster}", InsteadOf: "ipv6PodCIDRParentPrefix",
			Description: "The same as `podCIDRParentPrefixLabels`, for IPv6.",
		},
		{
			Key: "ipv6PodCIDRMaskSize", Required: "no", Default: "64", Example: "64",
			Description: "The prefix length of each Node's IPv6 pod CIDR.",
		},
		{
			Key: "nodeLabelsFromMachine", Required: "no", Default: "none: no Machine label is copied", Example: "[team, example.com/*]",
			Description: "Machine label keys copied to the Machine's Node, each an exact key or a prefix ending in `*`. The labels are set " +
				"when the Node is initialized and kept equal to the Machine's, with the MachinePool's topology labels other than zone and " +
				"region (`topology.ironcore.dev/rack`, `/site`, ...), which are always copied. These keys are the CCM's on Nodes: one " +
				"the Machine loses is removed from the Node, a label with another key is never touched. Keys under `kubernetes.io` or " +
				"`k8s.io` (`node-role.kubernetes.io/`, `node.kubernetes.io/`, ...) are refused at start.",
		},
	}
	for i := range fields {
		fields[i].Type = yamlType(fields[i].Key)
	}
	return fields
}

// knownKeys lists the file's keys, in the order they are documented.
func knownKeys() []string {
	fields := Fields()
	names := make([]string, 0, len(fields))
	for _, field := range fields {
		names = append(names, field.Key)
	}
	return names
}

// yamlType is the YAML type of the CloudConfig field key decodes into, or "".
func yamlType(key string) string {
	structType := reflect.TypeFor[CloudConfig]()
	for i := range structType.NumField() {
		field := structType.Field(i)
		if name, _, _ := strings.Cut(field.Tag.Get("json"), ","); name == key {
			switch field.Type.Kind() {
			case reflect.Slice:
				return "list of " + field.Type.Elem().Kind().String() + "s"
			case reflect.Map:
				return "mapping of " + field.Type.Key().Kind().String() + "s to " + field.Type.Elem().Kind().String() + "s"
			}
			return field.Type.Kind().String()
		}
	}
	return ""
}
