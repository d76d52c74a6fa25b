package ironcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/grants"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// WantedLoadBalancer returns the retained LoadBalancer the Service asks to take over; owned
// tells that it has already. One it cannot take over is a *NotAdoptable, unless the request is
// not strict: then there is none, and a new LoadBalancer is made.
func (c *Client) WantedLoadBalancer(ctx context.Context, owners Owners, service *corev1.Service, want lbspec.Adoption, desired *networkingv1alpha1.LoadBalancer) (lb *networkingv1alpha1.LoadBalancer, owned bool, err error) {
	until := "annotation " + keys.AnnotationLoadBalancerName + " names one this cluster retained, of the Service's type, or is removed"
	if want.Name != "" {
		lb, owned, err = c.AdoptableLoadBalancer(ctx, owners, service, want.Name, desired)
	} else {
		lb, owned, err = c.RetainedLoadBalancerAt(ctx, owners, service, want.Addresses, desired)
		until = "a LoadBalancer this cluster retained, of the Service's type, holds them, or annotation " + keys.AnnotationLoadBalancerIPs + " is removed"
	}
	var refused *NotAdoptable
	if !errors.As(err, &refused) {
		return lb, owned, err
	}
	refused.Until = cmp.Or(refused.Until, until)
	switch {
	case want.Strict || refused.Waiting:
	case refused.Held && desired.Spec.Type == networkingv1alpha1.LoadBalancerTypeInternal:
		// A new Internal LoadBalancer would hold the address too.
	case refused.Held:
		// IronCore gives a new Public LoadBalancer another address.
		refused.Fallback = true
	default:
		return nil, false, nil
	}
	return nil, false, refused
}

// RetainedLoadBalancerAt returns, read live, the LoadBalancer this cluster retained that holds
// exactly the addresses and is Adoptable; owned tells that the Service has it already. Otherwise
// it is a *NotAdoptable, Held if a LoadBalancer holds any of the addresses.
func (c *Client) RetainedLoadBalancerAt(ctx context.Context, owners Owners, service *corev1.Service, addresses []netip.Addr, desired *networkingv1alpha1.LoadBalancer) (lb *networkingv1alpha1.LoadBalancer, owned bool, err error) {
	lbs, err := c.LoadBalancers(ctx)
	if err != nil {
		return nil, false, err
	}
	refused := error(&NotAdoptable{Why: fmt.Sprintf("no IronCore LoadBalancer this cluster retained holds exactly the addresses %s", joinAddrs(addresses))})
	for i := range lbs {
		if !holdsAny(&lbs[i], addresses) || (!owners.Retains(&lbs[i]) && !owners.Owns(&lbs[i], service)) {
			continue
		}
		// The cache may be behind: another Service may have taken it, or this one.
		lb, err = c.LiveLoadBalancer(ctx, lbs[i].Name)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return nil, false, err
		case owners.Owns(lb, service):
			return lb, true, nil
		case !owners.Retains(lb) || !holdsAny(lb, addresses):
			continue
		}
		err := owners.Adoptable(lb, desired, service.Namespace)
		if err == nil && !holdsExactly(lb, addresses) {
			err = &NotAdoptable{Name: lb.Name, Why: fmt.Sprintf("holds %s, not exactly the requested addresses %s", strings.Join(Addresses(lb), ", "), joinAddrs(addresses))}
		}
		if err != nil {
			var notAdoptable *NotAdoptable
			if errors.As(err, &notAdoptable) {
				notAdoptable.Held = true
			}
			refused = err // another may still do
			continue
		}
		return lb, false, nil
	}
	return nil, false, refused
}

func holdsAny(lb *networkingv1alpha1.LoadBalancer, addresses []netip.Addr) bool {
	return slices.ContainsFunc(lb.Status.IPs, func(ip commonv1alpha1.IP) bool { return slices.Contains(addresses, ip.Unmap()) })
}

// holdsExactly tells whether lb's addresses are the given ones, in any order.
func holdsExactly(lb *networkingv1alpha1.LoadBalancer, addresses []netip.Addr) bool {
	if len(lb.Status.IPs) != len(addresses) {
		return false
	}
	for _, ip := range lb.Status.IPs {
		if !slices.Contains(addresses, ip.Unmap()) {
			return false
		}
	}
	return true
}

func joinAddrs(addresses []netip.Addr) string {
	texts := make([]string, 0, len(addresses))
	for _, addr := range addresses {
		texts = append(texts, addr.String())
	}
	return strings.Join(texts, ", ")
}

// CheckServicePrefixes confirms, live, that the Prefixes a Service names exist, are of their
// family and were given to its namespace (grants.Pool); the defaults are every namespace's.
func (c *Client) CheckServicePrefixes(ctx context.Context, prefixes map[corev1.IPFamily]string, namespace string, defaults map[corev1.IPFamily]string) error {
	for _, family := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		name, ok := prefixes[family]
		if !ok {
			continue
		}
		prefix, err := c.prefixOfFamily(ctx, name, family)
		var wrongFamily *WrongFamily
		if errors.Is(err, ErrNotFound) || errors.As(err, &wrongFamily) {
			return &lbspec.Problem{Reason: lbspec.ReasonInternalPrefixMissing, Message: fmt.Sprintf(
				"the Service's %s address cannot come from the Prefix it names (%v); no LoadBalancer was made: name an existing %s Prefix of namespace %s, "+
					"or remove the annotation to use the cloud-config's", family, err, family, c.namespace)}
		}
		if err != nil {
			return err
		}
		if name == defaults[family] {
			continue
		}
		if why := grants.Pool(prefix, namespace); why != "" {
			return &lbspec.Problem{Reason: lbspec.ReasonPrefixNotGranted, Message: fmt.Sprintf(
				"the Service's %s address cannot come from IronCore Prefix %s: it %s; no LoadBalancer was made: name a Prefix the platform team gave this namespace, "+
					"or remove the annotation to use the cloud-config's", family, name, why)}
		}
	}
	return nil
}

// CheckRequestedAddresses confirms that each requested address is in its pool and free, also of
// LoadBalancers holding it outside IPAM (the reference CCM's literal addresses). IPAM refuses a
// taken one all the same; this says so at once, without naming the holder.
func (c *Client) CheckRequestedAddresses(ctx context.Context, requested map[string]netip.Addr) error {
	if len(requested) == 0 {
		return nil
	}
	unavailable := func(addr netip.Addr, why string) error {
		return &lbspec.Problem{Reason: lbspec.ReasonAddressUnavailable, Message: fmt.Sprintf(
			"the requested address %s %s; no LoadBalancer was made: request a free address of a Prefix given to the namespace, or none", addr, why)}
	}
	lbs, err := c.LoadBalancers(ctx)
	if err != nil {
		return err
	}
	for _, pool := range slices.Sorted(maps.Keys(requested)) {
		addr := requested[pool]
		prefix := &ipamv1alpha1.Prefix{}
		if err := c.checkExists(ctx, "Prefix", pool, prefix); err != nil {
			return err
		}
		if prefix.Spec.Prefix != nil && !prefix.Spec.Prefix.Contains(addr) {
			return unavailable(addr, fmt.Sprintf("is not in Prefix %s (%s), the one it would be allocated from", pool, prefix.Spec.Prefix))
		}
		for _, used := range prefix.Status.Used {
			if used.Contains(addr) {
				return unavailable(addr, fmt.Sprintf("is already allocated from Prefix %s", pool))
			}
		}
		for i := range lbs {
			if holdsAny(&lbs[i], []netip.Addr{addr}) || slices.ContainsFunc(lbs[i].Spec.IPs, func(source networkingv1alpha1.IPSource) bool {
				return source.Value != nil && source.Value.Unmap() == addr
			}) {
				return unavailable(addr, "is held by another LoadBalancer")
			}
		}
	}
	return nil
}
