package provider

import (
	"context"
	"net/netip"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// ReadOnly gives read-only tools (ironcore-ccm-inspect) the CCM's own lookups, so that what
// they report is what the CCM sees, not a second opinion. Every method only reads.
type ReadOnly struct {
	instances *instances
	routes    *routes
}

// NewReadOnly builds the view on a client whose cache the caller started, for the cluster
// and its Network; nodes lists the target cluster's Nodes.
func NewReadOnly(client *ironcore.Client, cluster, network string, nodes corelisters.NodeLister) *ReadOnly {
	return &ReadOnly{
		instances: &instances{ironcore: client, network: network},
		routes:    &routes{ironcore: client, cluster: cluster, network: network, nodes: nodes},
	}
}

// MachineForNode finds the Node's Machine as the CCM does: by provider ID, else by name, else
// by guest hostname. A missing Machine is an error wrapping ironcore.ErrNotFound.
func (r *ReadOnly) MachineForNode(ctx context.Context, node *corev1.Node) (*computev1alpha1.Machine, error) {
	return r.instances.ironcore.MachineForNode(ctx, node)
}

// InstanceMetadata is what the CCM sets on the Node when it initializes it, or why it cannot.
func (r *ReadOnly) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	return r.instances.InstanceMetadata(ctx, node)
}

// ManagedRoute is a route the CCM manages, as its ListRoutes reports it.
type ManagedRoute struct {
	NetworkInterface string
	CIDR             netip.Prefix
	// Node is the route's target Node; empty when no Node is on the Machine any more.
	Node types.NodeName
}

// ListRoutes lists the routes the route controller is told exist.
func (r *ReadOnly) ListRoutes(ctx context.Context) ([]ManagedRoute, error) {
	listed, err := r.routes.ListRoutes(ctx, r.routes.cluster)
	if err != nil {
		return nil, err
	}
	managed := make([]ManagedRoute, 0, len(listed))
	for _, route := range listed {
		nicName, _ := networkInterfaceOfRouteName(route.Name)
		cidr, err := parseCIDR(route.DestinationCIDR)
		if err != nil {
			return nil, err
		}
		managed = append(managed, ManagedRoute{NetworkInterface: nicName, CIDR: cidr, Node: route.TargetNode})
	}
	return managed, nil
}

// RouteNetworkInterface names the NetworkInterface the CCM puts the Node's pod CIDRs on, or
// says why it cannot place them yet.
func (r *ReadOnly) RouteNetworkInterface(ctx context.Context, node *corev1.Node) (string, error) {
	return r.routes.networkInterfaceOf(ctx, &cloudprovider.Route{TargetNode: types.NodeName(node.Name)})
}

// ManagedRoutes are the prefixes of the NetworkInterface's spec that the CCM manages: those
// its routes annotation records.
func ManagedRoutes(nic *networkingv1alpha1.NetworkInterface) []netip.Prefix {
	return managedPrefixes(nic)
}
