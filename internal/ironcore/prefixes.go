package ironcore

import (
	"context"
	"fmt"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// podCIDRPrefixes selects the cached Prefixes: pod CIDRs, labelled from their entry's template.
func podCIDRPrefixes() (labels.Selector, error) {
	requirement, err := labels.NewRequirement(keys.LabelPodCIDR, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("select pod CIDR Prefixes: %w", err)
	}
	return labels.NewSelector().Add(*requirement), nil
}

// PodCIDRPrefix returns the named pod CIDR Prefix from the cache, if they are cached, else
// live; a cached read does not find Prefixes without keys.LabelPodCIDR.
func (c *Client) PodCIDRPrefix(ctx context.Context, name string) (*ipamv1alpha1.Prefix, error) {
	if !c.podCIDRPrefixesCached {
		return c.PodCIDRPrefixLive(ctx, name)
	}
	prefix := &ipamv1alpha1.Prefix{}
	if err := c.getCached(ctx, "Prefix", c.namespace, name, prefix); err != nil {
		return nil, err
	}
	return prefix, nil
}

// PodCIDRPrefixLive reads the named Prefix from the API server.
func (c *Client) PodCIDRPrefixLive(ctx context.Context, name string) (*ipamv1alpha1.Prefix, error) {
	fresh, err := c.readLive(ctx, &ipamv1alpha1.Prefix{ObjectMeta: metav1.ObjectMeta{Namespace: c.namespace, Name: name}})
	if err != nil {
		return nil, err
	}
	prefix, ok := fresh.(*ipamv1alpha1.Prefix)
	if !ok {
		return nil, fmt.Errorf("read Prefix %s/%s: got a %T", c.namespace, name, fresh)
	}
	return prefix, nil
}

// NetworkInterfaceLive reads the named NetworkInterface from the API server.
func (c *Client) NetworkInterfaceLive(ctx context.Context, name string) (*networkingv1alpha1.NetworkInterface, error) {
	return c.nics.readLive(ctx, name)
}

// CheckPodCIDRPrefixesReadable confirms that the credentials may list Prefixes: without that,
// the cache of pod CIDR Prefixes would never sync.
func (c *Client) CheckPodCIDRPrefixesReadable(ctx context.Context) error {
	list := &ipamv1alpha1.PrefixList{}
	err := c.api.List(ctx, list, client.InNamespace(c.namespace), client.HasLabels{keys.LabelPodCIDR}, client.Limit(1))
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return fmt.Errorf("the IronCore credentials may not list Prefixes in %s, which pod CIDR allocation watches: grant list and watch on "+
			"prefixes.ipam.ironcore.dev (the chart's IronCore Role has them): %w", c.namespace, err)
	default:
		return fmt.Errorf("list IronCore Prefixes in %s: %w", c.namespace, err)
	}
}

// NetworkInterfacesReferencedByMachines names the NetworkInterfaces the cached Machines list.
func (c *Client) NetworkInterfacesReferencedByMachines(ctx context.Context) (map[string]bool, error) {
	list := &computev1alpha1.MachineList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace)); err != nil {
		return nil, fmt.Errorf("list Machines: %w", err)
	}
	names := map[string]bool{}
	for i := range list.Items {
		for _, name := range computev1alpha1.MachineNetworkInterfaceNames(&list.Items[i]) {
			names[name] = true
		}
	}
	return names, nil
}

// OnPodCIDRPrefixChange calls handler with each pod CIDR Prefix added or changed.
func (c *Client) OnPodCIDRPrefixChange(handler func(*ipamv1alpha1.Prefix)) error {
	return onAddOrChange(c, &ipamv1alpha1.Prefix{}, "Prefixes", false, func(old, current *ipamv1alpha1.Prefix) bool {
		return old.ResourceVersion != current.ResourceVersion
	}, handler)
}

// ParentPrefixes reads, live, the named parent Prefix of pod CIDRs, or those with the labels.
func (c *Client) ParentPrefixes(ctx context.Context, name string, selector map[string]string) ([]ipamv1alpha1.Prefix, error) {
	if name != "" {
		prefix := &ipamv1alpha1.Prefix{}
		if err := c.checkExists(ctx, "Prefix", name, prefix); err != nil {
			return nil, err
		}
		return []ipamv1alpha1.Prefix{*prefix}, nil
	}
	list := &ipamv1alpha1.PrefixList{}
	if err := c.api.List(ctx, list, client.InNamespace(c.namespace), client.MatchingLabels(selector)); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return nil, fmt.Errorf("list IronCore Prefixes labelled %v: the IronCore credentials are not allowed to: %w", selector, err)
		}
		return nil, fmt.Errorf("list IronCore Prefixes labelled %v: %w", selector, err)
	}
	return list.Items, nil
}

// PrefixFamily is the IP family of a Prefix: its spec's, else its range's.
func PrefixFamily(prefix *ipamv1alpha1.Prefix) corev1.IPFamily {
	switch {
	case prefix.Spec.IPFamily != "":
		return prefix.Spec.IPFamily
	case prefix.Spec.Prefix == nil || !prefix.Spec.Prefix.IsValid():
		return ""
	case prefix.Spec.Prefix.Addr().Is4():
		return corev1.IPv4Protocol
	default:
		return corev1.IPv6Protocol
	}
}

// HasRoomFor tells whether the allocated Prefix has a free range of the given length.
func HasRoomFor(prefix *ipamv1alpha1.Prefix, length int) bool {
	if prefix.Spec.Prefix == nil || !prefix.Spec.Prefix.IsValid() || prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated {
		return false
	}
	var builder netipx.IPSetBuilder
	builder.AddPrefix(prefix.Spec.Prefix.Prefix)
	for _, used := range prefix.Status.Used {
		builder.RemovePrefix(used.Prefix)
	}
	free, err := builder.IPSet()
	if err != nil {
		return false
	}
	for _, p := range free.Prefixes() {
		if p.Bits() <= length {
			return true
		}
	}
	return false
}
