// Package podcidrs allocates Nodes' pod CIDRs from IronCore's IPAM, and releases them. A Node's
// pod CIDR is an ephemeral entry of its NetworkInterface's spec.prefixes; IronCore allocates
// the Prefix <nic>-pf-<index> from the entry's parent and routes it to the NetworkInterface.
// The entry is the record. IronCore names the Prefix by the entry's index, so an entry is never
// moved: only removed, and only when no ephemeral entry that stays comes after it.
//
// The provider builds the Allocator with its own way of finding a Node's NetworkInterface, so
// that routes and pod CIDRs land on the same one; allocated CIDRs need no literal route.
package podcidrs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
)

// Config is what New builds an Allocator from. The lookups of Nodes are the provider's: the
// routes find a Node's NetworkInterface the same way.
type Config struct {
	IronCore *ironcore.Client
	// Cluster is the cluster's name; its entries and their Prefixes are labelled with it.
	Cluster string
	// Network is the cluster Network, on which the released NetworkInterfaces are listed.
	Network string
	// Families are the configured families, IPv4 first; see config.CloudConfig.PodCIDRFamilies.
	Families []config.PodCIDRFamily
	// NetworkInterfaceOfNode names the Node's NetworkInterface on the cluster Network.
	NetworkInterfaceOfNode func(ctx context.Context, node *corev1.Node) (string, error)
	// NotReady tells an error of NetworkInterfaceOfNode that says IronCore has not yet filled
	// in what tells the NetworkInterface: the Node then waits rather than fails.
	NotReady func(err error) bool
	// NodesByMachine maps Machine names to every Node that may run on them, from the cache:
	// more than one when Nodes claim the same Machine, or a Node's hostname is ambiguous.
	NodesByMachine func(ctx context.Context) (map[string][]*corev1.Node, error)
}

// Provider is the cloud provider as the allocator builds on it (pkg/provider's Cloud): its
// IronCore client, its cloud-config and its lookups of Nodes.
type Provider interface {
	IronCore() *ironcore.Client
	CloudConfig() config.CloudConfig
	NodeNetworkInterface(ctx context.Context, node *corev1.Node) (string, error)
	NodesByMachine(ctx context.Context) (map[string][]*corev1.Node, error)
}

// ForProvider builds the Allocator, nil unless the cloud-config turns pod CIDR allocation on;
// notReady tells the provider's errors that mean IronCore has not filled in enough yet.
func ForProvider(p Provider, notReady func(error) bool) *Allocator {
	cloudConfig := p.CloudConfig()
	families := cloudConfig.PodCIDRFamilies()
	if len(families) == 0 {
		return nil
	}
	return New(Config{
		IronCore: p.IronCore(), Cluster: cloudConfig.ClusterName, Network: cloudConfig.NetworkName, Families: families,
		NetworkInterfaceOfNode: p.NodeNetworkInterface, NotReady: notReady, NodesByMachine: p.NodesByMachine,
	})
}

// Allocator allocates and releases Nodes' pod CIDRs.
type Allocator struct {
	ironcore               *ironcore.Client
	cluster                string
	network                string
	families               []config.PodCIDRFamily
	networkInterfaceOfNode func(ctx context.Context, node *corev1.Node) (string, error)
	notReady               func(err error) bool
	nodesByMachine         func(ctx context.Context) (map[string][]*corev1.Node, error)
}

var _ nodeipam.Allocator = (*Allocator)(nil)

// New builds the Allocator; every field of the Config is required.
func New(cfg Config) *Allocator {
	return &Allocator{
		ironcore:               cfg.IronCore,
		cluster:                cfg.Cluster,
		network:                cfg.Network,
		families:               cfg.Families,
		networkInterfaceOfNode: cfg.NetworkInterfaceOfNode,
		notReady:               cfg.NotReady,
		nodesByMachine:         cfg.NodesByMachine,
	}
}

// AllocatePodCIDRs moves the Node's pod CIDRs forward by one step, without waiting. A Node that
// has pod CIDRs keeps them; entries of its NetworkInterface that do not hold them are released.
func (a *Allocator) AllocatePodCIDRs(ctx context.Context, node *corev1.Node) (nodeipam.Allocation, error) {
	nicName, err := a.networkInterfaceOfNode(ctx, node)
	switch {
	case err != nil && nodeipam.HasPodCIDRs(node):
		// Which NetworkInterface holds its entries, if any, cannot be told: leave it.
		klog.V(2).InfoS("Cannot tell the NetworkInterface of a Node with pod CIDRs", "node", klog.KObj(node), "err", err)
		return nodeipam.Allocation{CIDRs: node.Spec.PodCIDRs}, nil
	case err != nil && a.notReady(err):
		return nodeipam.Allocation{Pending: []string{err.Error()}}, nil
	case err != nil:
		return nodeipam.Allocation{}, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
	}
	result := nodeipam.Allocation{NetworkInterface: nicName}
	nic, err := a.ironcore.NetworkInterface(ctx, nicName)
	if err != nil {
		return result, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
	}
	if nodeipam.HasPodCIDRs(node) {
		return a.keepExisting(ctx, node, nic, result)
	}
	// A NetworkInterface's entries are one Node's pod CIDRs: a second Node on the Machine
	// would be given the same ranges.
	if other, err := a.otherNodeOnMachine(ctx, node, machineOf(nic)); err != nil || other != "" {
		if err == nil {
			err = fmt.Errorf("Node %s runs on the same Machine %s, and NetworkInterface %s holds the pod CIDRs of one Node: %w",
				other, machineOf(nic), nicName, nodeipam.ErrMachineShared)
		}
		return result, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
	}
	entries := ironcore.PodCIDREntries(nic, a.cluster)
	if missing := a.missingFamilies(entries); len(missing) > 0 {
		// The cache may not show entries this process just added: the write compares with
		// what it last wrote, and adds nothing then.
		added := false
		err := a.ironcore.UpdateNetworkInterface(ctx, nicName, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			missing := a.missingFamilies(ironcore.PodCIDREntries(nic, a.cluster))
			added = len(missing) > 0
			if !added {
				return false, nil
			}
			for _, family := range missing {
				nic.Spec.Prefixes = append(nic.Spec.Prefixes, podCIDRSource(a.cluster, family))
			}
			// The entries make the NetworkInterface this cluster's, so that they are found
			// again (and released) by the cluster label.
			if err := ironcore.ClaimForCluster(nic, a.cluster); err != nil {
				return false, err
			}
			return true, nil
		})
		if err != nil {
			return result, fmt.Errorf("add pod CIDR entries for Node %s: %w", node.Name, err)
		}
		result.Added = added
		for _, family := range missing {
			result.Pending = append(result.Pending, fmt.Sprintf("%s: IronCore to allocate the entry just added", family.Family))
			result.PendingFamilies = append(result.PendingFamilies, family.Family)
		}
		if added {
			klog.V(2).InfoS("Added pod CIDR entries", "node", klog.KObj(node), "networkInterface", klog.KRef(a.ironcore.Namespace(), nicName), "families", len(missing))
		}
		return result, nil
	}
	var cidrs []string
	for _, family := range a.families {
		entry := entries[slices.IndexFunc(entries, func(e ironcore.PodCIDREntry) bool { return e.Family == family.Family })]
		cidr, waiting, err := a.ironcore.AllocatedPodCIDR(ctx, a.cluster, nic, entry)
		if err != nil {
			return result, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
		}
		if !cidr.IsValid() {
			result.Pending = append(result.Pending, fmt.Sprintf("%s: %s", family.Family, waiting))
			result.PendingFamilies = append(result.PendingFamilies, family.Family)
			continue
		}
		cidrs = append(cidrs, cidr.String())
	}
	if len(result.Pending) > 0 {
		return result, nil
	}
	// spec.podCIDRs cannot be changed once set: confirm the allocation on the API server, not
	// on a cache that may still show an entry just released or a Prefix being deleted.
	if waiting, err := a.confirm(ctx, nicName, entries, cidrs); err != nil || waiting != "" {
		if waiting != "" {
			result.Pending = []string{waiting}
		}
		return result, err
	}
	result.CIDRs = cidrs
	return result, nil
}

// otherNodeOnMachine names a Node other than node that comes first to the Machine's pod CIDRs:
// one that has pod CIDRs already, or else one created before node. Nodes that only may run on
// the Machine (their hostname is ambiguous) count too: they may hold its ranges.
func (a *Allocator) otherNodeOnMachine(ctx context.Context, node *corev1.Node, machine string) (string, error) {
	if machine == "" {
		return "", nil
	}
	claims, err := a.nodesByMachine(ctx)
	if err != nil {
		return "", fmt.Errorf("find the Nodes on Machine %s: %w", machine, err)
	}
	for _, other := range claims[machine] {
		if other.UID == node.UID {
			continue
		}
		if nodeipam.HasPodCIDRs(other) || comesFirst(other, node) {
			return other.Name, nil
		}
	}
	return "", nil
}

// comesFirst orders Nodes by creation, then name.
func comesFirst(a, b *corev1.Node) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// missingFamilies are the configured families without an entry.
func (a *Allocator) missingFamilies(entries []ironcore.PodCIDREntry) []config.PodCIDRFamily {
	var missing []config.PodCIDRFamily
	for _, family := range a.families {
		if !slices.ContainsFunc(entries, func(e ironcore.PodCIDREntry) bool { return e.Family == family.Family }) {
			missing = append(missing, family)
		}
	}
	return missing
}

// confirm reads the NetworkInterface and the Prefixes of its entries from the API server and
// returns what is awaited if they no longer hold the CIDRs the cache showed for them.
func (a *Allocator) confirm(ctx context.Context, nicName string, entries []ironcore.PodCIDREntry, cidrs []string) (string, error) {
	nic, err := a.ironcore.NetworkInterfaceLive(ctx, nicName)
	if err != nil {
		return "", fmt.Errorf("confirm the pod CIDRs on NetworkInterface %s: %w", nicName, err)
	}
	live := ironcore.PodCIDREntries(nic, a.cluster)
	for _, entry := range entries {
		if !slices.Contains(live, entry) {
			return fmt.Sprintf("the cache to show NetworkInterface %s as it is (entry %d changed)", nicName, entry.Index), nil
		}
		name := networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nicName, entry.Index)
		prefix, err := a.ironcore.PodCIDRPrefixLive(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			return fmt.Sprintf("IronCore to create Prefix %s anew", name), nil
		}
		if err != nil {
			return "", fmt.Errorf("confirm the pod CIDRs on NetworkInterface %s: %w", nicName, err)
		}
		if !metav1.IsControlledBy(prefix, nic) || !prefix.DeletionTimestamp.IsZero() || prefix.Spec.Prefix == nil ||
			!slices.Contains(cidrs, prefix.Spec.Prefix.Masked().String()) {
			return fmt.Sprintf("the cache to show Prefix %s as it is", name), nil
		}
	}
	return "", nil
}

// keepExisting leaves a Node's pod CIDRs as they are. If IronCore did not allocate them, the
// NetworkInterface's entries are released, as nothing uses them; otherwise they are left alone,
// even one that looks odd.
func (a *Allocator) keepExisting(ctx context.Context, node *corev1.Node, nic *networkingv1alpha1.NetworkInterface, result nodeipam.Allocation) (nodeipam.Allocation, error) {
	result.CIDRs = slices.Clone(node.Spec.PodCIDRs)
	if len(result.CIDRs) == 0 {
		result.CIDRs = []string{node.Spec.PodCIDR}
	}
	inUse := map[netip.Prefix]bool{}
	for _, value := range result.CIDRs {
		if cidr, err := netip.ParsePrefix(value); err == nil {
			inUse[cidr.Masked()] = true
		}
	}
	unused := map[int]string{}
	for _, entry := range ironcore.PodCIDREntries(nic, a.cluster) {
		cidr, _, err := a.ironcore.AllocatedPodCIDR(ctx, a.cluster, nic, entry)
		if err != nil {
			return result, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
		}
		if inUse[cidr] {
			return result, nil
		}
		unused[entry.Index] = describeEntry(entry, cidr)
	}
	result.FromElsewhere = true
	if len(unused) == 0 {
		return result, nil
	}
	released, err := a.removeEntries(ctx, nic.Name, unused, func(*networkingv1alpha1.NetworkInterface) error { return nil })
	result.Released = released
	if err != nil {
		return result, fmt.Errorf("release the unused pod CIDR entries of Node %s: %w", node.Name, err)
	}
	return result, nil
}
