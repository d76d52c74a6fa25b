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

// The Machines behind Nodes: a Node's Machine is named by its provider ID, or, before the
// Node is initialized, by the Node's name, as Machine name or guest hostname.

// MachineNamedBy names the Machine the Node's provider ID names in this cluster's IronCore
// namespace: none for a Node not initialized yet, nor for one of another cloud or namespace,
// for which notOurs says why.
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

// ReadOnlyNodeMachine follows the Node's provider ID to its Machine and the Machine's
// NetworkInterfaces on the Network (on every Network if network is empty), as the cache holds
// them, without copies: the caller must not change them. The Machine is nil for a Node not
// initialized yet or not ours (notOurs says why, see MachineNamedBy), and when the cache does
// not hold it: the cache has synced, so it is gone.
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

// MachineForNode finds the Node's Machine: by provider ID when the Node has one, otherwise by
// the Node's name, as Machine name or guest hostname. ErrNotFound is returned only after the
// API server, not just the cache, says the Machine does not exist.
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

// machineByName reads the named Machine, or the Machine with the given guest hostname, from
// the cache and confirms a miss with a live read.
func (c *Client) machineByName(ctx context.Context, name, hostname string) (*computev1alpha1.Machine, error) {
	machine, err := c.cachedMachine(ctx, name, hostname)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return machine, err
	}
	return c.LiveMachine(ctx, name)
}

// cachedMachineOfUninitializedNode finds the Machine of a Node without a provider ID as MachineForNode
// does, from the cache only: for callers that run often and can take a miss for an answer.
func (c *Client) cachedMachineOfUninitializedNode(ctx context.Context, node *corev1.Node) (*computev1alpha1.Machine, error) {
	return c.cachedMachine(ctx, node.Name, node.Name)
}

// cachedMachine reads the named Machine, or else the Machine with the given guest hostname, from the
// cache. A miss is ErrNotFound.
func (c *Client) cachedMachine(ctx context.Context, name, hostname string) (*computev1alpha1.Machine, error) {
	machine, err := c.Machine(ctx, name)
	if err == nil || !errors.Is(err, ErrNotFound) || hostname == "" {
		return machine, err
	}
	return c.MachineByHostname(ctx, hostname)
}

// NodesByMachine maps Machine names to the Nodes on them: by provider ID, or for a Node not yet
// initialized, as CreateRoute finds its Machine: by Machine name, else by guest hostname, from
// the cache. A Machine claimed by several Nodes maps to the one ClaimsByMachine lists first.
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

// ClaimsByMachine maps Machine names to every Node that may run on them: Nodes whose provider
// ID names the Machine first, then uninitialized Nodes found by Machine name or guest hostname.
// An uninitialized Node whose hostname several Machines share claims each of them, after every
// other claimant: which one it runs on cannot be told, so none of them may be taken for unused,
// and none may be taken from a Node known to run on it.
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
		machine, err := c.cachedMachineOfUninitializedNode(ctx, node)
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
