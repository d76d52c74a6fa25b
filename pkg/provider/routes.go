package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// routes implements Routes as prefixes on the NetworkInterfaces of the cluster's Machines: a
// Node's pod CIDR becomes a prefix of its NetworkInterface on the cluster Network, so that the
// Network delivers the pods' traffic to it. The CIDRs this CCM added are recorded in the
// keys.AnnotationRoutes annotation; only those are routes, so no other prefix is ever removed.
type routes struct {
	ironcore *ironcore.Client
	cluster  string
	network  string
	// nodes is the CCM's Node lister, set through Cloud.SetInformers.
	nodes corelisters.NodeLister
}

var _ cloudprovider.Routes = (*routes)(nil)

// ListRoutes lists the managed prefixes from the cache. A route whose Node is gone has no target
// Node, which tells the route controller to delete it.
func (r *routes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	if r.nodes == nil {
		return nil, errors.New("routes are not initialized: the Node informer is not set")
	}
	nics, err := r.ironcore.NetworkInterfacesOfCluster(ctx, r.cluster, r.network)
	if err != nil {
		return nil, err
	}
	nodeOfMachine, err := r.nodesByMachine(ctx)
	if err != nil {
		return nil, err
	}
	var list []*cloudprovider.Route
	for i := range nics {
		nic := &nics[i]
		var node *corev1.Node
		if nic.Spec.MachineRef != nil {
			node = nodeOfMachine[nic.Spec.MachineRef.Name]
		}
		for _, cidr := range managedPrefixes(nic) {
			route := &cloudprovider.Route{Name: routeName(nic.Name, cidr), DestinationCIDR: cidr.String()}
			if node != nil {
				route.TargetNode = types.NodeName(node.Name)
				route.TargetNodeAddresses = node.Status.Addresses
			}
			list = append(list, route)
		}
		// Pod CIDRs allocated by IronCore route by themselves, and are released by the node
		// IPAM controller when their Node is gone; listed only while the Node has them, they
		// are never asked to be deleted.
		if node == nil {
			continue
		}
		for _, cidr := range r.ironcore.AllocatedPodCIDRs(ctx, r.cluster, nic) {
			// Not before the Node has it: the route controller would ask to delete it.
			if !slices.Contains(node.Spec.PodCIDRs, cidr.String()) {
				continue
			}
			list = append(list, &cloudprovider.Route{Name: routeName(nic.Name, cidr), DestinationCIDR: cidr.String(),
				TargetNode: types.NodeName(node.Name), TargetNodeAddresses: node.Status.Addresses})
		}
	}
	return list, nil
}

// CreateRoute adds the route's CIDR to the prefixes of the target Node's NetworkInterface. It
// compares against spec, so a lagging status never causes a duplicate, and a prefix already
// there (the reference CCM's, say) is taken over. A route that cannot be placed yet is an
// error, so that it is retried.
func (r *routes) CreateRoute(ctx context.Context, _ string, _ string, route *cloudprovider.Route) error {
	cidr, err := parseCIDR(route.DestinationCIDR)
	if err != nil {
		return err
	}
	nicName, err := r.networkInterfaceOf(ctx, route)
	if err != nil {
		countRouteOperation("create", false, err)
		return fmt.Errorf("route %s to Node %s: %w", cidr, route.TargetNode, err)
	}
	if allocated, err := r.allocatedByIronCore(ctx, nicName, cidr); err != nil || allocated {
		countRouteOperation("create", false, err)
		return err
	}
	added := false
	err = r.ironcore.UpdateNetworkInterface(ctx, nicName, false, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		if added = addPrefix(nic, cidr); !added {
			return false, nil
		}
		// The route makes the NetworkInterface this cluster's. Labelled in the same write, it
		// is listed (so the route can be deleted) at once, also for a Node not initialized yet,
		// and the cluster-label controller has nothing left to write.
		if err := ironcore.ClaimForCluster(nic, r.cluster); err != nil {
			added = false
			return false, err
		}
		return true, nil
	})
	countRouteOperation("create", added, err)
	if err != nil {
		return fmt.Errorf("route %s to Node %s: %w", cidr, route.TargetNode, err)
	}
	if added {
		klog.V(2).InfoS("Created route", "cidr", cidr, "node", klog.KRef("", string(route.TargetNode)), "networkInterface", klog.KRef(r.ironcore.Namespace(), nicName))
	}
	return nil
}

// allocatedByIronCore tells whether cidr is a pod CIDR IronCore allocated as an ephemeral
// prefix of the NetworkInterface: it routes already, and a literal copy would be a second one.
func (r *routes) allocatedByIronCore(ctx context.Context, nicName string, cidr netip.Prefix) (bool, error) {
	nic, err := r.ironcore.NetworkInterface(ctx, nicName)
	if err != nil {
		return false, fmt.Errorf("route %s: %w", cidr, err)
	}
	return slices.Contains(r.ironcore.AllocatedPodCIDRs(ctx, r.cluster, nic), cidr), nil
}

// DeleteRoute removes the route's CIDR if this CCM manages it as a route; every other prefix,
// including pod CIDRs IronCore allocated, stays.
func (r *routes) DeleteRoute(ctx context.Context, _ string, route *cloudprovider.Route) error {
	cidr, err := parseCIDR(route.DestinationCIDR)
	if err != nil {
		return err
	}
	nicName, ok := networkInterfaceOfRouteName(route.Name)
	if !ok {
		if nicName, err = r.networkInterfaceOf(ctx, route); err != nil {
			return fmt.Errorf("route %s to Node %s: %w", cidr, route.TargetNode, err)
		}
	}
	removed := false
	err = r.ironcore.UpdateNetworkInterface(ctx, nicName, true, func(nic *networkingv1alpha1.NetworkInterface) (bool, error) {
		var err error
		removed, err = removePrefix(nic, cidr)
		return removed, err
	})
	if errors.Is(err, ironcore.ErrNotFound) {
		countRouteOperation("delete", false, nil)
		return nil // gone with its Machine
	}
	countRouteOperation("delete", removed, err)
	if err != nil {
		return fmt.Errorf("delete route %s: %w", cidr, err)
	}
	if removed {
		klog.V(2).InfoS("Deleted route", "cidr", cidr, "node", klog.KRef("", string(route.TargetNode)), "networkInterface", klog.KRef(r.ironcore.Namespace(), nicName))
	}
	return nil
}

func countRouteOperation(operation string, changed bool, err error) {
	result := "unchanged"
	switch {
	case err != nil:
		result = "error"
	case changed:
		result = "changed"
	}
	metrics.RouteOperations.WithLabelValues(operation, result).Inc()
}

// networkInterfaceOf finds the target Node's NetworkInterface on the cluster Network by its
// InternalIPs. For a Node not initialized yet, it takes the Machine's only one, so that the
// route need not wait and fail with a Warning event on every new Node.
func (r *routes) networkInterfaceOf(ctx context.Context, route *cloudprovider.Route) (string, error) {
	if r.nodes == nil {
		return "", errors.New("routes are not initialized: the Node informer is not set")
	}
	node, err := r.nodes.Get(string(route.TargetNode))
	if err != nil {
		return "", fmt.Errorf("read Node: %w", err)
	}
	return r.networkInterfaceOfNode(ctx, node, route.TargetNodeAddresses)
}

// networkInterfaceOfNode is networkInterfaceOf for a Node, with more addresses of it.
func (r *routes) networkInterfaceOfNode(ctx context.Context, node *corev1.Node, addresses []corev1.NodeAddress) (string, error) {
	internalIPs := map[netip.Addr]bool{}
	for _, address := range append(slices.Clone(node.Status.Addresses), addresses...) {
		if addr, err := netip.ParseAddr(address.Address); err == nil && address.Type == corev1.NodeInternalIP {
			internalIPs[addr] = true
		}
	}
	machine, err := r.ironcore.MachineForNode(ctx, node)
	if err != nil {
		return "", err
	}
	nics, err := r.ironcore.ReadOnlyNetworkInterfacesOn(ctx, machine, r.network)
	if err != nil {
		return "", err
	}
	var onNetwork []*networkingv1alpha1.NetworkInterface
	for _, nic := range nics {
		if nic.Spec.MachineRef != nil && nic.Spec.MachineRef.Name != machine.Name {
			continue
		}
		if cluster := nic.Labels[keys.LabelCluster]; cluster != "" && cluster != r.cluster {
			return "", fmt.Errorf("NetworkInterface %s belongs to cluster %q", nic.Name, cluster)
		}
		onNetwork = append(onNetwork, nic)
	}
	if len(internalIPs) == 0 {
		if len(onNetwork) == 1 && len(onNetwork[0].Status.IPs) > 0 {
			return onNetwork[0].Name, nil
		}
		return "", fmt.Errorf("the Node has no InternalIP yet to tell its NetworkInterface, and Machine %s has not exactly one with IPs on Network %s: %w",
			machine.Name, r.network, errNotReady)
	}
	for _, nic := range onNetwork {
		for _, ip := range nic.Status.IPs {
			if internalIPs[ip.Addr] {
				return nic.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no NetworkInterface of Machine %s on Network %s has one of the Node's InternalIPs yet: %w", machine.Name, r.network, errNotReady)
}

// nodesByMachine maps Machine names to the Nodes on them (see ironcore.Client.NodesByMachine), from
// the cache only: ListRoutes runs on every pass of the route controller.
func (r *routes) nodesByMachine(ctx context.Context) (map[string]*corev1.Node, error) {
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return r.ironcore.NodesByMachine(ctx, nodes)
}

// claimsByMachine maps Machine names to every Node that may run on them (see
// ironcore.Client.ClaimsByMachine), from the cache.
func (r *routes) claimsByMachine(ctx context.Context) (map[string][]*corev1.Node, error) {
	nodes, err := r.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return r.ironcore.ClaimsByMachine(ctx, nodes)
}

// routeName names a route by its NetworkInterface and CIDR; DeleteRoute reads the
// NetworkInterface back from it. Object names cannot contain "/", so the first one ends it.
func routeName(nicName string, cidr netip.Prefix) string {
	return nicName + "/" + cidr.String()
}

func networkInterfaceOfRouteName(name string) (string, bool) {
	nicName, _, ok := strings.Cut(name, "/")
	return nicName, ok && nicName != ""
}

func parseCIDR(s string) (netip.Prefix, error) {
	cidr, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("route destination %q is not a CIDR: %w", s, err)
	}
	return cidr.Masked(), nil
}

// managedPrefixes are the prefixes of the NetworkInterface's spec this CCM manages.
func managedPrefixes(nic *networkingv1alpha1.NetworkInterface) []netip.Prefix {
	var managed []netip.Prefix
	for _, cidr := range annotatedRoutes(nic) {
		if specHasPrefix(nic, cidr) {
			managed = append(managed, cidr)
		}
	}
	return managed
}

// annotatedRoutes reads the routes annotation; entries that do not parse are ignored.
func annotatedRoutes(nic *networkingv1alpha1.NetworkInterface) []netip.Prefix {
	var cidrs []netip.Prefix
	for _, value := range strings.Split(nic.Annotations[keys.AnnotationRoutes], ",") {
		if cidr, err := netip.ParsePrefix(strings.TrimSpace(value)); err == nil {
			cidrs = append(cidrs, cidr.Masked())
		}
	}
	return cidrs
}

func setAnnotatedRoutes(nic *networkingv1alpha1.NetworkInterface, cidrs []netip.Prefix) {
	if len(cidrs) == 0 {
		delete(nic.Annotations, keys.AnnotationRoutes)
		return
	}
	values := make([]string, 0, len(cidrs))
	for _, cidr := range cidrs {
		values = append(values, cidr.String())
	}
	slices.Sort(values)
	if nic.Annotations == nil {
		nic.Annotations = map[string]string{}
	}
	nic.Annotations[keys.AnnotationRoutes] = strings.Join(values, ",")
}

func specHasPrefix(nic *networkingv1alpha1.NetworkInterface, cidr netip.Prefix) bool {
	return slices.ContainsFunc(nic.Spec.Prefixes, func(source networkingv1alpha1.PrefixSource) bool {
		return source.Value != nil && source.Value.Masked() == cidr
	})
}

// addPrefix makes cidr a managed prefix of the NetworkInterface and reports whether that
// changed anything.
func addPrefix(nic *networkingv1alpha1.NetworkInterface, cidr netip.Prefix) bool {
	changed := false
	if !specHasPrefix(nic, cidr) {
		nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: cidr}})
		changed = true
	}
	if managed := annotatedRoutes(nic); !slices.Contains(managed, cidr) {
		setAnnotatedRoutes(nic, append(managed, cidr))
		changed = true
	}
	return changed
}

// removePrefix removes cidr from the NetworkInterface if it is a managed prefix, and reports
// whether that changed anything. Entries without a value (ephemeral prefixes) are left alone,
// and so is their index: IronCore names an ephemeral entry's Prefix after it (<nic>-pf-<i>), so
// shifting it would make IronCore delete that Prefix and allocate another. An entry of cidr
// before the last ephemeral one is therefore replaced by a literal entry moved from after it.
// When there is none to move, nothing is removed and an error says why: the route controller
// retries, and a literal prefix added later (a new route) lets the removal go through.
func removePrefix(nic *networkingv1alpha1.NetworkInterface, cidr netip.Prefix) (bool, error) {
	managed := annotatedRoutes(nic)
	if !slices.Contains(managed, cidr) {
		return false, nil
	}
	prefixes, err := withoutPrefix(nic.Spec.Prefixes, cidr)
	if err != nil {
		return false, fmt.Errorf("cannot delete route %s from NetworkInterface %s: %w", cidr, nic.Name, err)
	}
	nic.Spec.Prefixes = prefixes
	setAnnotatedRoutes(nic, slices.DeleteFunc(managed, func(p netip.Prefix) bool { return p == cidr }))
	return true, nil
}

// withoutPrefix returns sources without the literal entries of cidr, keeping every ephemeral
// entry at its index (see removePrefix).
func withoutPrefix(sources []networkingv1alpha1.PrefixSource, cidr netip.Prefix) ([]networkingv1alpha1.PrefixSource, error) {
	isCIDR := func(source networkingv1alpha1.PrefixSource) bool {
		return source.Value != nil && source.Value.Masked() == cidr
	}
	lastEphemeral := -1
	for i, source := range sources {
		if source.Value == nil {
			lastEphemeral = i
		}
	}
	// The entries up to the last ephemeral one keep their places; those after it may move.
	head := slices.Clone(sources[:lastEphemeral+1])
	tail := slices.DeleteFunc(slices.Clone(sources[lastEphemeral+1:]), isCIDR)
	for i := range head {
		if !isCIDR(head[i]) {
			continue
		}
		if len(tail) == 0 {
			return nil, fmt.Errorf("it is entry %d of spec.prefixes, before the ephemeral entry %d, which would be renamed "+
				"(and its Prefix reallocated by IronCore) if the entries after it moved up, and no literal entry after that one "+
				"can take its place", i, lastEphemeral)
		}
		head[i], tail = tail[len(tail)-1], tail[:len(tail)-1]
	}
	return append(head, tail...), nil
}
