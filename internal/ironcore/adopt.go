package ironcore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// WantedLoadBalancer returns the retained LoadBalancer the Service asks to take over (see
// lbspec.Adoption): by name or by its addresses. owned tells that the Service took it over
// already. One it cannot take over is a *NotAdoptable saying why and what would change that,
// unless the request is not strict: then there is none, and a new LoadBalancer is made.
func (c *Client) WantedLoadBalancer(ctx context.Context, owners Owners, service *corev1.Service, want lbspec.Adoption, desired *networkingv1alpha1.LoadBalancer) (lb *networkingv1alpha1.LoadBalancer, owned bool, err error) {
	until := "annotation " + keys.AnnotationLoadBalancerName + " names one this cluster retained, of the Service's type, or is removed"
	if want.Name != "" {
		lb, owned, err = c.AdoptableLoadBalancer(ctx, owners, service, want.Name, desired)
	} else {
		lb, owned, err = c.RetainedLoadBalancerAt(ctx, owners, service, want.Addresses, desired)
		until = "a LoadBalancer this cluster retained, of the Service's type, holds them, or annotation " + keys.AnnotationLoadBalancerIPs + " is removed"
	}
	var refused *NotAdoptable
	if errors.As(err, &refused) {
		if !want.Strict {
			return nil, false, nil
		}
		refused.Until = until
	}
	return lb, owned, err
}

// RetainedLoadBalancerAt returns the LoadBalancer this cluster retained that holds exactly the
// addresses and can become desired (Adoptable), for the Service to take over, read from the API
// server (as AdoptableLoadBalancer). owned tells that the Service took it over already. None
// holding them is a *NotAdoptable, and so is one that does but cannot be taken over, saying why.
func (c *Client) RetainedLoadBalancerAt(ctx context.Context, owners Owners, service *corev1.Service, addresses []netip.Addr, desired *networkingv1alpha1.LoadBalancer) (lb *networkingv1alpha1.LoadBalancer, owned bool, err error) {
	lbs, err := c.LoadBalancers(ctx)
	if err != nil {
		return nil, false, err
	}
	refused := error(&NotAdoptable{Why: fmt.Sprintf("no IronCore LoadBalancer this cluster retained holds exactly the addresses %s", joinAddrs(addresses))})
	for i := range lbs {
		if !holdsExactly(&lbs[i], addresses) || (!owners.Retains(&lbs[i]) && !owners.Owns(&lbs[i], service)) {
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
		case !owners.Retains(lb) || !holdsExactly(lb, addresses):
			continue
		}
		if err := owners.Adoptable(lb, desired); err != nil {
			refused = err // another may still do
			continue
		}
		return lb, false, nil
	}
	return nil, false, refused
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

// CheckServicePrefixes confirms, with live reads, that the Prefixes a Service names for its
// Internal addresses (lbspec.ServicePrefixes) exist and are of their IP family; one that does
// not, or is of the other family, is a *lbspec.Problem naming it.
func (c *Client) CheckServicePrefixes(ctx context.Context, prefixes map[corev1.IPFamily]string) error {
	for _, family := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		name, ok := prefixes[family]
		if !ok {
			continue
		}
		err := c.CheckPrefix(ctx, name, family)
		var wrongFamily *WrongFamily
		if errors.Is(err, ErrNotFound) || errors.As(err, &wrongFamily) {
			return &lbspec.Problem{Reason: lbspec.ReasonInternalPrefixMissing, Message: fmt.Sprintf(
				"the Service's %s address cannot come from the Prefix it names (%v); no LoadBalancer was made: name an existing %s Prefix of namespace %s, "+
					"or remove the annotation to use the cloud-config's", family, err, family, c.namespace)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
