package inspect

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// extraDetail is why an extra route matters; the CCM cannot know --cluster-cidr's effect here.
const extraDetail = "the route controller deletes it if it is inside --cluster-cidr"

// inspectRoutes compares each Node's pod CIDRs with the prefixes of the NetworkInterface the
// CCM routes them to, and lists the managed prefixes that no pod CIDR accounts for.
func (in *inspection) inspectRoutes(ctx context.Context) ([]Route, error) {
	managed, err := in.view.ListRoutes(ctx)
	if err != nil {
		return nil, err
	}
	byNode := map[string][]provider.ManagedRoute{}
	for _, route := range managed {
		byNode[string(route.Node)] = append(byNode[string(route.Node)], route)
	}
	routes := []Route{}
	for i := range in.nodes {
		routes = append(routes, in.nodeRoutes(ctx, &in.nodes[i], byNode[in.nodes[i].Name])...)
	}
	orphaned := byNode[""]
	slices.SortFunc(orphaned, func(a, b provider.ManagedRoute) int {
		return cmp.Or(cmp.Compare(a.NetworkInterface, b.NetworkInterface), a.CIDR.Addr().Compare(b.CIDR.Addr()))
	})
	for _, route := range orphaned {
		routes = append(routes, Route{NetworkInterface: route.NetworkInterface, CIDR: route.CIDR.String(), State: RouteExtra,
			Detail: "managed by the CCM on a Machine without a Node; " + extraDetail})
	}
	return routes, nil
}

// nodeRoutes reports one Node's pod CIDRs, then the managed prefixes on its Machine that are
// none of them.
func (in *inspection) nodeRoutes(ctx context.Context, node *corev1.Node, managed []provider.ManagedRoute) []Route {
	var routes []Route
	var cidrs []netip.Prefix
	for _, value := range node.Spec.PodCIDRs {
		cidr, err := netip.ParsePrefix(value)
		if err != nil {
			routes = append(routes, Route{Node: node.Name, CIDR: value, State: RouteMissing, Detail: "the pod CIDR does not parse: " + err.Error()})
			continue
		}
		cidrs = append(cidrs, cidr.Masked())
	}
	if len(cidrs) > 0 {
		nic, placeErr := in.routeNetworkInterface(ctx, node)
		var allocated []netip.Prefix
		if placeErr == nil {
			allocated = in.ironcore.AllocatedPodCIDRs(ctx, in.cluster, nic)
		}
		for _, cidr := range cidrs {
			routes = append(routes, in.podCIDRRoute(node, nic, placeErr, allocated, cidr))
		}
	}
	for _, route := range managed {
		if !slices.Contains(cidrs, route.CIDR) {
			routes = append(routes, Route{Node: node.Name, NetworkInterface: route.NetworkInterface, CIDR: route.CIDR.String(), State: RouteExtra,
				Detail: "managed by the CCM but not a pod CIDR of the Node; " + extraDetail})
		}
	}
	return routes
}

// routeNetworkInterface reads the NetworkInterface the CCM puts the Node's routes on.
func (in *inspection) routeNetworkInterface(ctx context.Context, node *corev1.Node) (*networkingv1alpha1.NetworkInterface, error) {
	name, err := in.view.RouteNetworkInterface(ctx, node)
	if err != nil {
		return nil, err
	}
	return in.ironcore.NetworkInterface(ctx, name)
}

func (in *inspection) podCIDRRoute(node *corev1.Node, nic *networkingv1alpha1.NetworkInterface, placeErr error, allocated []netip.Prefix, cidr netip.Prefix) Route {
	route := Route{Node: node.Name, CIDR: cidr.String()}
	if placeErr != nil {
		route.State, route.Detail = RouteMissing, fmt.Sprintf("the CCM cannot place it: %v", placeErr)
		return route
	}
	route.NetworkInterface = nic.Name
	switch {
	case slices.Contains(allocated, cidr):
		route.State, route.Detail = RoutePresent, "allocated by IronCore's IPAM as an ephemeral prefix of the NetworkInterface, which routes it"
	case !hasPrefix(nic.Spec.Prefixes, cidr):
		route.State, route.Detail = RouteMissing, fmt.Sprintf("not in spec.prefixes of NetworkInterface %s; the route controller adds it on its next pass", nic.Name)
	case !slices.Contains(provider.ManagedRoutes(nic), cidr):
		route.State, route.Detail = RouteUnmanaged, fmt.Sprintf("in spec.prefixes, but not recorded in the %s annotation; the CCM takes it over on its next pass", keys.AnnotationRoutes)
	case !slices.ContainsFunc(nic.Status.Prefixes, func(p commonv1alpha1.IPPrefix) bool { return p.Masked() == cidr }):
		route.State, route.Detail = RoutePending, "in spec.prefixes, not yet in status.prefixes: IronCore has not applied it"
	default:
		route.State = RoutePresent
	}
	if route.State != RouteMissing && nic.Labels[keys.LabelCluster] != in.cluster {
		route.Detail = join(route.Detail, fmt.Sprintf("NetworkInterface %s is not labelled %s=%s, so the CCM does not list its routes (its cluster-label controller adds the label)",
			nic.Name, keys.LabelCluster, in.cluster))
	}
	return route
}

func hasPrefix(sources []networkingv1alpha1.PrefixSource, cidr netip.Prefix) bool {
	return slices.ContainsFunc(sources, func(source networkingv1alpha1.PrefixSource) bool {
		return source.Value != nil && source.Value.Masked() == cidr
	})
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
