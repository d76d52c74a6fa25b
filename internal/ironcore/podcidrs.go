package ironcore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// PodCIDREntry is one of a cluster's pod CIDR entries of a NetworkInterface's spec.prefixes.
type PodCIDREntry struct {
	Index  int
	Family corev1.IPFamily
}

// PodCIDREntries are the NetworkInterface's entries that the cluster added for pod CIDRs.
func PodCIDREntries(nic *networkingv1alpha1.NetworkInterface, cluster string) []PodCIDREntry {
	var entries []PodCIDREntry
	for i, source := range nic.Spec.Prefixes {
		if source.Ephemeral == nil || source.Ephemeral.PrefixTemplate == nil {
			continue
		}
		labels := source.Ephemeral.PrefixTemplate.Labels
		family := corev1.IPFamily(labels[keys.LabelPodCIDR])
		if labels[keys.LabelCluster] != cluster || (family != corev1.IPv4Protocol && family != corev1.IPv6Protocol) {
			continue
		}
		entries = append(entries, PodCIDREntry{Index: i, Family: family})
	}
	return entries
}

// AllocatedPodCIDRs are the CIDRs allocated for the cluster's entries, from the cache.
func (c *Client) AllocatedPodCIDRs(ctx context.Context, cluster string, nic *networkingv1alpha1.NetworkInterface) []netip.Prefix {
	var cidrs []netip.Prefix
	for _, entry := range PodCIDREntries(nic, cluster) {
		if cidr, _, err := c.AllocatedPodCIDR(ctx, cluster, nic, entry); err == nil && cidr.IsValid() {
			cidrs = append(cidrs, cidr)
		}
	}
	return cidrs
}

// AllocatedPodCIDR returns the CIDR IronCore allocated for the entry, or what it waits for. A
// Prefix of the entry's name may be an earlier NetworkInterface's awaiting deletion, or of an
// entry that moved, which IronCore does not reallocate: neither is taken.
func (c *Client) AllocatedPodCIDR(ctx context.Context, cluster string, nic *networkingv1alpha1.NetworkInterface, entry PodCIDREntry) (netip.Prefix, string, error) {
	name := networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nic.Name, entry.Index)
	prefix, err := c.PodCIDRPrefix(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return netip.Prefix{}, fmt.Sprintf("IronCore to create Prefix %s", name), nil
	case err != nil:
		return netip.Prefix{}, "", err
	case !metav1.IsControlledBy(prefix, nic):
		return netip.Prefix{}, fmt.Sprintf("Prefix %s of an earlier NetworkInterface %s to be deleted", name, nic.Name), nil
	case !prefix.DeletionTimestamp.IsZero():
		// The Prefix of a removed entry at the same index: its range is being given back.
		return netip.Prefix{}, fmt.Sprintf("Prefix %s of a removed entry to be deleted", name), nil
	case prefix.Labels[keys.LabelPodCIDR] != string(entry.Family) || prefix.Labels[keys.LabelCluster] != cluster:
		return netip.Prefix{}, "", fmt.Errorf("prefix %s, named after entry %d of NetworkInterface %s, was made for another entry (labels %v); "+
			"IronCore does not allocate it anew: delete the Prefix", name, entry.Index, nic.Name, prefix.Labels)
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
