package podcidrs

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

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// ephemeralManagedBy is IronCore's annotation that has it delete an ephemeral Prefix once its
// entry is gone; without it, IronCore leaves the Prefix (and its range) until the
// NetworkInterface is deleted.
const (
	ephemeralManagedByKey   = "common.ironcore.dev/ephemeral-managed-by"
	ephemeralManagedByValue = "ephemeral-manager"
)

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

// Allocated are the CIDRs allocated for the NetworkInterface's pod CIDR entries of the
// cluster, from the cache; entries not allocated are left out.
func Allocated(ctx context.Context, client *ironcore.Client, cluster string, nic *networkingv1alpha1.NetworkInterface) []netip.Prefix {
	var cidrs []netip.Prefix
	for _, entry := range podCIDREntries(nic, cluster) {
		if cidr, _, err := allocatedPodCIDR(ctx, client, cluster, nic, entry); err == nil && cidr.IsValid() {
			cidrs = append(cidrs, cidr)
		}
	}
	return cidrs
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

// describeEntry names an entry to be released in messages: by its CIDR once allocated.
func describeEntry(entry podCIDREntry, cidr netip.Prefix) string {
	if cidr.IsValid() {
		return cidr.String()
	}
	return fmt.Sprintf("%s entry %d (not allocated)", entry.family, entry.index)
}

// removeEntries removes the entries at the given indices, if they are still the cluster's
// entries there and stillUnused accepts the NetworkInterface as written, and returns their
// descriptions. IronCore then deletes their Prefixes.
func (a *Allocator) removeEntries(ctx context.Context, nicName string, remove map[int]string, stillUnused func(*networkingv1alpha1.NetworkInterface) error) ([]string, error) {
	var removed []string
	err := a.ironcore.UpdateNetworkInterface(ctx, nicName, true, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		removed = nil
		// The write may wait for a token: the decision is checked again on what it writes.
		if err := stillUnused(nic); err != nil {
			return false, err
		}
		ours := map[int]bool{}
		for _, entry := range podCIDREntries(nic, a.cluster) {
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
