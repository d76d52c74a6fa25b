package podcidrs

import (
	"context"
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

// describeEntry names an entry to be released in messages: by its CIDR once allocated.
func describeEntry(entry ironcore.PodCIDREntry, cidr netip.Prefix) string {
	if cidr.IsValid() {
		return cidr.String()
	}
	return fmt.Sprintf("%s entry %d (not allocated)", entry.Family, entry.Index)
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
		for _, entry := range ironcore.PodCIDREntries(nic, a.cluster) {
			if _, ok := remove[entry.Index]; ok {
				ours[entry.Index] = true
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
