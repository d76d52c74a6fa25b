package ironcore

import (
	"context"
	"errors"
	"fmt"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
)

// A Node's Machine is named by its provider ID or, before the Node is initialized, by the
// Node's name, as Machine name or guest hostname.

// MachineNamedBy names the Node's Machine by provider ID: none for a Node not initialized yet,
// nor for one of another cloud or namespace, for which notOurs says why.
func (c *Client) MachineNamedBy(node *corev1.Node) (machine, notOurs string) {
	return machineNamedBy(node.Spec.ProviderID, c.namespace)
}

func machineNamedBy(providerID, namespace string) (machine, notOurs string) {
	if providerID == "" {
		return "", ""
	}
	id, err := providerid.Parse(providerID)
	switch {
	case err != nil:
		return "", err.Error()
	case id.Namespace != namespace:
		return "", fmt.Sprintf("provider ID %s is in IronCore namespace %q, but this cluster's namespace is %q", providerID, id.Namespace, namespace)
	}
	return id.Machine, ""
}

// ReadOnlyNodeMachine returns the Node's Machine by provider ID and its NetworkInterfaces on the
// Network (any if empty), uncopied: the caller must not change them. The Machine is nil for a
// Node not ours (notOurs says why) or not initialized, and when the synced cache lacks it.
func (c *Client) ReadOnlyNodeMachine(ctx context.Context, node *corev1.Node, network string) (
	machine *computev1alpha1.Machine, nics []*networkingv1alpha1.NetworkInterface, notOurs string, err error,
) {
	name, notOurs := c.MachineNamedBy(node)
	if name == "" {
		return nil, nil, notOurs, nil
	}
	machine, err = c.ReadOnlyMachine(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil, "", nil
	case err != nil:
		return nil, nil, "", err
	}
	nics, err = c.ReadOnlyNetworkInterfacesOn(ctx, machine, network)
	return machine, nics, "", err
}

// MachineForNode finds the Node's Machine. ErrNotFound means the API server, not just the
// cache, says it does not exist.
func (c *Client) MachineForNode(ctx context.Context, node *corev1.Node) (*computev1alpha1.Machine, error) {
	if node.Spec.ProviderID != "" {
		name, notOurs := c.MachineNamedBy(node)
		if notOurs != "" {
			return nil, fmt.Errorf("Node %s: %s", node.Name, notOurs)
		}
		return c.machineByName(ctx, name, "")
	}
	return c.machineByName(ctx, node.Name, node.Name)
}

// machineByName is cachedMachine with a miss confirmed live.
func (c *Client) machineByName(ctx context.Context, name, hostname string) (*computev1alpha1.Machine, error) {
	machine, err := c.cachedMachine(ctx, name, hostname)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return machine, err
	}
	return c.LiveMachine(ctx, name)
}

// cachedMachine reads the named Machine, or else the one with the guest hostname, from the cache.
func (c *Client) cachedMachine(ctx context.Context, name, hostname string) (*computev1alpha1.Machine, error) {
	machine, err := c.Machine(ctx, name)
	if err == nil || !errors.Is(err, ErrNotFound) || hostname == "" {
		return machine, err
	}
	return c.MachineByHostname(ctx, hostname)
}

// NodesByMachine maps Machine names to the Node ClaimsByMachine lists first for each.
func (c *Client) NodesByMachine(ctx context.Context, nodes []*corev1.Node) (map[string]*corev1.Node, error) {
	claims, err := c.ClaimsByMachine(ctx, nodes)
	if err != nil {
		return nil, err
	}
	byMachine := make(map[string]*corev1.Node, len(claims))
	for machine, claimants := range claims {
		byMachine[machine] = claimants[0]
	}
	return byMachine, nil
}

// ClaimsByMachine maps Machine names to every Node that may run on them, from the cache, Nodes
// named by provider ID first. An uninitialized Node whose hostname several Machines share
// claims each of them, last: none may be taken for unused, nor from a Node known to run on it.
func (c *Client) ClaimsByMachine(ctx context.Context, nodes []*corev1.Node) (map[string][]*corev1.Node, error) {
	claims, ambiguous := map[string][]*corev1.Node{}, map[string][]*corev1.Node{}
	for _, node := range nodes {
		if machine, _ := c.MachineNamedBy(node); machine != "" {
			claims[machine] = append(claims[machine], node)
		}
	}
	for _, node := range nodes {
		if node.Spec.ProviderID != "" {
			continue
		}
		machine, err := c.cachedMachine(ctx, node.Name, node.Name)
		switch {
		case errors.Is(err, ErrNotFound):
			// No route or pod CIDR can have been placed for it either.
			continue
		case errors.Is(err, ErrAmbiguousHostname):
			candidates, err := c.MachineNamesByHostname(ctx, node.Name)
			if err != nil {
				return nil, fmt.Errorf("find the Machines of Node %s: %w", node.Name, err)
			}
			for _, name := range candidates {
				ambiguous[name] = append(ambiguous[name], node)
			}
		case err != nil:
			// Better no listing than a route listed without its Node, which would be deleted.
			return nil, fmt.Errorf("find the Machine of Node %s: %w", node.Name, err)
		default:
			claims[machine.Name] = append(claims[machine.Name], node)
		}
	}
	for machine, nodes := range ambiguous {
		claims[machine] = append(claims[machine], nodes...)
	}
	return claims, nil
}
