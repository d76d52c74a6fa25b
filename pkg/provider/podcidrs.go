package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
)

// Pod CIDRs from IronCore's IPAM. A Node's pod CIDR of a family is an ephemeral entry of its
// NetworkInterface's spec.prefixes, a Prefix template with a parent; IronCore allocates the
// Prefix <nic>-pf-<index> from the parent, without overlap, and routes the range to the
// NetworkInterface. The entry is the record: it is added once, the Node's spec.podCIDRs is set
// from the allocated Prefixes, and the entry is removed when the Node is gone. IronCore names
// the Prefix by the entry's index, so an entry is never moved: only removed, and only when no
// ephemeral entry that stays comes after it.

// ephemeralManagedBy is IronCore's annotation that has it delete an ephemeral Prefix once its
// entry is gone; without it, IronCore leaves the Prefix (and its range) until the
// NetworkInterface is deleted.
const (
	ephemeralManagedByKey   = "common.ironcore.dev/ephemeral-managed-by"
	ephemeralManagedByValue = "ephemeral-manager"
)

// podCIDRs allocates and releases Nodes' pod CIDRs.
type podCIDRs struct {
	ironcore *ironcore.Client
	// routes finds a Node's NetworkInterface, and the Nodes of Machines.
	routes   *routes
	cluster  string
	families []config.PodCIDRFamily
}

// podCIDREntry is one of the cluster's pod CIDR entries of a NetworkInterface's spec.prefixes.
type podCIDREntry struct {
	index  int
	family corev1.IPFamily
}

// podCIDREntries are the NetworkInterface's entries that this cluster added for pod CIDRs.
func podCIDREntries(nic *networkingv1alpha1.NetworkInterface, cluster string) []podCIDREntry {
	var entries []podCIDREntry
	for i, source := range nic.Spec.Prefixes {
		if source.Ephemeral == nil || source.Ephemeral.PrefixTemplate == nil {
			continue
		}
		labels := source.Ephemeral.PrefixTemplate.Labels
		family := corev1.IPFamily(labels[keys.LabelPodCIDR])
		if labels[keys.LabelCluster] != cluster || (family != corev1.IPv4Protocol && family != corev1.IPv6Protocol) {
			continue
		}
		entries = append(entries, podCIDREntry{index: i, family: family})
	}
	return entries
}

// podCIDRSource is the entry that asks IronCore for a pod CIDR of the family.
func podCIDRSource(cluster string, family config.PodCIDRFamily) networkingv1alpha1.PrefixSource {
	spec := ipamv1alpha1.PrefixSpec{IPFamily: family.Family, PrefixLength: int32(family.MaskSize)} //nolint:gosec // validated: at most 128
	if family.ParentPrefix != "" {
		spec.ParentRef = &corev1.LocalObjectReference{Name: family.ParentPrefix}
	} else {
		spec.ParentSelector = &metav1.LabelSelector{MatchLabels: family.ParentLabels}
	}
	return networkingv1alpha1.PrefixSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
		PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{
				Labels:      map[string]string{keys.LabelCluster: cluster, keys.LabelPodCIDR: string(family.Family)},
				Annotations: map[string]string{ephemeralManagedByKey: ephemeralManagedByValue},
			},
			Spec: spec,
		},
	}}
}

// allocatedPodCIDR returns the CIDR IronCore allocated for the entry, or what it waits for.
// A Prefix of the entry's name that is not this NetworkInterface's, or not of this entry, is
// not taken: the first may be an earlier NetworkInterface's awaiting deletion, the second
// would be an entry that moved, which IronCore does not reallocate.
func allocatedPodCIDR(ctx context.Context, client *ironcore.Client, cluster string, nic *networkingv1alpha1.NetworkInterface, entry podCIDREntry) (netip.Prefix, string, error) {
	name := networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nic.Name, entry.index)
	prefix, err := client.PodCIDRPrefix(ctx, name)
	switch {
	case errors.Is(err, ironcore.ErrNotFound):
		return netip.Prefix{}, fmt.Sprintf("IronCore to create Prefix %s", name), nil
	case err != nil:
		return netip.Prefix{}, "", err
	case !metav1.IsControlledBy(prefix, nic):
		return netip.Prefix{}, fmt.Sprintf("Prefix %s of an earlier NetworkInterface %s to be deleted", name, nic.Name), nil
	case !prefix.DeletionTimestamp.IsZero():
		// The Prefix of a removed entry at the same index: its range is being given back.
		return netip.Prefix{}, fmt.Sprintf("Prefix %s of a removed entry to be deleted", name), nil
	case prefix.Labels[keys.LabelPodCIDR] != string(entry.family) || prefix.Labels[keys.LabelCluster] != cluster:
		return netip.Prefix{}, "", fmt.Errorf("prefix %s, named after entry %d of NetworkInterface %s, was made for another entry (labels %v); "+
			"IronCore does not allocate it anew: delete the Prefix", name, entry.index, nic.Name, prefix.Labels)
	case prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated || prefix.Spec.Prefix == nil || !prefix.Spec.Prefix.IsValid():
		phase := string(prefix.Status.Phase)
		if phase == "" {
			phase = "new"
		}
		return netip.Prefix{}, fmt.Sprintf("IronCore to allocate Prefix %s (%s)", name, phase), nil
	default:
		return prefix.Spec.Prefix.Masked(), "", nil
	}
}

// allocatedPodCIDRs are the CIDRs allocated for the NetworkInterface's pod CIDR entries, from
// the cache; entries not allocated are left out.
func allocatedPodCIDRs(ctx context.Context, client *ironcore.Client, cluster string, nic *networkingv1alpha1.NetworkInterface) []netip.Prefix {
	var cidrs []netip.Prefix
	for _, entry := range podCIDREntries(nic, cluster) {
		if cidr, _, err := allocatedPodCIDR(ctx, client, cluster, nic, entry); err == nil && cidr.IsValid() {
			cidrs = append(cidrs, cidr)
		}
	}
	return cidrs
}

// Allocate moves the Node's pod CIDRs forward by one step, without waiting: it adds the
// entries of the families its NetworkInterface lacks, or reports the CIDRs once IronCore has
// allocated them all, or what is still awaited. A Node that has pod CIDRs keeps them; entries
// of its NetworkInterface that do not hold them are released.
func (p *podCIDRs) Allocate(ctx context.Context, node *corev1.Node) (nodeipam.Allocation, error) {
	nicName, err := p.routes.networkInterfaceOfNode(ctx, node, nil)
	switch {
	case err != nil && nodeipam.HasPodCIDRs(node):
		// Which NetworkInterface holds its entries, if any, cannot be told: leave it.
		klog.V(2).InfoS("Cannot tell the NetworkInterface of a Node with pod CIDRs", "node", klog.KObj(node), "err", err)
		return nodeipam.Allocation{CIDRs: node.Spec.PodCIDRs}, nil
	case errors.Is(err, errNotReady):
		return nodeipam.Allocation{Pending: []string{err.Error()}}, nil
	case err != nil:
		return nodeipam.Allocation{}, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
	}
	result := nodeipam.Allocation{NetworkInterface: nicName}
	nic, err := p.ironcore.NetworkInterface(ctx, nicName)
	if err != nil {
		return result, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
	}
	if nodeipam.HasPodCIDRs(node) {
		return p.keepExisting(ctx, node, nic, result)
	}
	entries := podCIDREntries(nic, p.cluster)
	if missing := p.missingFamilies(entries); len(missing) > 0 {
		// The cache may not show entries this process just added: the write compares with
		// what it last wrote, and adds nothing then.
		added := false
		err := p.ironcore.UpdateNetworkInterface(ctx, nicName, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
			missing := p.missingFamilies(podCIDREntries(nic, p.cluster))
			added = len(missing) > 0
			if !added {
				return false, nil
			}
			for _, family := range missing {
				nic.Spec.Prefixes = append(nic.Spec.Prefixes, podCIDRSource(p.cluster, family))
			}
			// The entries make the NetworkInterface this cluster's, so that they are found
			// again (and released) by the cluster label.
			if err := ironcore.ClaimForCluster(nic, p.cluster); err != nil {
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
			klog.V(2).InfoS("Added pod CIDR entries", "node", klog.KObj(node), "networkInterface", klog.KRef(p.ironcore.Namespace(), nicName), "families", len(missing))
		}
		return result, nil
	}
	var cidrs []string
	for _, family := range p.families {
		entry := entries[slices.IndexFunc(entries, func(e podCIDREntry) bool { return e.family == family.Family })]
		cidr, waiting, err := allocatedPodCIDR(ctx, p.ironcore, p.cluster, nic, entry)
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
	if waiting, err := p.confirm(ctx, nicName, entries, cidrs); err != nil || waiting != "" {
		if waiting != "" {
			result.Pending = []string{waiting}
		}
		return result, err
	}
	result.CIDRs = cidrs
	return result, nil
}

// confirm reads the NetworkInterface and the Prefixes of its entries from the API server and
// returns what is awaited if they no longer hold the CIDRs the cache showed for them.
func (p *podCIDRs) confirm(ctx context.Context, nicName string, entries []podCIDREntry, cidrs []string) (string, error) {
	nic, err := p.ironcore.NetworkInterfaceLive(ctx, nicName)
	if err != nil {
		return "", fmt.Errorf("confirm the pod CIDRs on NetworkInterface %s: %w", nicName, err)
	}
	live := podCIDREntries(nic, p.cluster)
	for _, entry := range entries {
		if !slices.Contains(live, entry) {
			return fmt.Sprintf("the cache to show NetworkInterface %s as it is (entry %d changed)", nicName, entry.index), nil
		}
		name := networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nicName, entry.index)
		prefix, err := p.ironcore.PodCIDRPrefixLive(ctx, name)
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

// missingFamilies are the configured families without an entry.
func (p *podCIDRs) missingFamilies(entries []podCIDREntry) []config.PodCIDRFamily {
	var missing []config.PodCIDRFamily
	for _, family := range p.families {
		if !slices.ContainsFunc(entries, func(e podCIDREntry) bool { return e.family == family.Family }) {
			missing = append(missing, family)
		}
	}
	return missing
}

// keepExisting leaves a Node's pod CIDRs as they are. If none of them is the allocation of an
// entry of its NetworkInterface, they came from elsewhere (another allocator was faster, or the
// Node was given them), and the entries are released: nothing uses them. Entries of a Node
// whose CIDRs IronCore allocated are left alone, even one that looks odd.
func (p *podCIDRs) keepExisting(ctx context.Context, node *corev1.Node, nic *networkingv1alpha1.NetworkInterface, result nodeipam.Allocation) (nodeipam.Allocation, error) {
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
	for _, entry := range podCIDREntries(nic, p.cluster) {
		cidr, _, err := allocatedPodCIDR(ctx, p.ironcore, p.cluster, nic, entry)
		if err != nil {
			return result, fmt.Errorf("pod CIDRs of Node %s: %w", node.Name, err)
		}
		if inUse[cidr] {
			return result, nil
		}
		unused[entry.index] = describeEntry(entry, cidr)
	}
	result.FromElsewhere = true
	if len(unused) == 0 {
		return result, nil
	}
	released, err := p.removeEntries(ctx, nic.Name, unused, func(*networkingv1alpha1.NetworkInterface) error { return nil })
	result.Released = released
	if err != nil {
		return result, fmt.Errorf("release the unused pod CIDR entries of Node %s: %w", node.Name, err)
	}
	return result, nil
}

func describeEntry(entry podCIDREntry, cidr netip.Prefix) string {
	if cidr.IsValid() {
		return cidr.String()
	}
	return fmt.Sprintf("%s entry %d (not allocated)", entry.family, entry.index)
}

// removeEntries removes the entries at the given indices, if they are still the cluster's
// entries there and stillUnused accepts the NetworkInterface as written, and returns their
// descriptions. IronCore then deletes their Prefixes.
func (p *podCIDRs) removeEntries(ctx context.Context, nicName string, remove map[int]string, stillUnused func(*networkingv1alpha1.NetworkInterface) error) ([]string, error) {
	var removed []string
	err := p.ironcore.UpdateNetworkInterface(ctx, nicName, true, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		removed = nil
		// The write may wait for a token: the decision is checked again on what it writes.
		if err := stillUnused(nic); err != nil {
			return false, err
		}
		ours := map[int]bool{}
		for _, entry := range podCIDREntries(nic, p.cluster) {
			if _, ok := remove[entry.index]; ok {
				ours[entry.index] = true
			}
		}
		if len(ours) == 0 {
			return false, nil
		}
		kept, err := withoutEntries(nic.Spec.Prefixes, ours)
		if err != nil {
			return false, err
		}
		for index := range ours {
			removed = append(removed, remove[index])
		}
		nic.Spec.Prefixes = kept
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(removed)
	return removed, nil
}

// withoutEntries returns sources without the entries at the indices. It refuses to move an
// ephemeral entry that stays: IronCore would rename its Prefix and allocate it anew.
func withoutEntries(sources []networkingv1alpha1.PrefixSource, remove map[int]bool) ([]networkingv1alpha1.PrefixSource, error) {
	if len(remove) == 0 {
		return sources, nil
	}
	first := slices.Min(slices.Collect(maps.Keys(remove)))
	kept := make([]networkingv1alpha1.PrefixSource, 0, len(sources))
	for i, source := range sources {
		if remove[i] {
			continue
		}
		if i > first && source.Ephemeral != nil {
			return nil, fmt.Errorf("entry %d of spec.prefixes, an ephemeral prefix, comes after pod CIDR entry %d: removing that entry would "+
				"rename its Prefix and have IronCore allocate it anew, so it is kept", i, first)
		}
		kept = append(kept, source)
	}
	return kept, nil
}
