package ironcore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrAmbiguousHostname is wrapped when more than one Machine has the guest hostname looked for.
var ErrAmbiguousHostname = errors.New("hostname is shared by several Machines")

// Machine returns the named Machine from the cache.
func (c *Client) Machine(ctx context.Context, name string) (*computev1alpha1.Machine, error) {
	machine := &computev1alpha1.Machine{}
	if err := c.getCached(ctx, "Machine", c.namespace, name, machine); err != nil {
		return nil, err
	}
	return machine, nil
}

// MachineByHostname returns the one Machine whose guest hostname is hostname.
func (c *Client) MachineByHostname(ctx context.Context, hostname string) (*computev1alpha1.Machine, error) {
	list := &computev1alpha1.MachineList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace), client.MatchingFields{indexMachineHostname: hostname}); err != nil {
		return nil, fmt.Errorf("list Machines with hostname %q: %w", hostname, err)
	}
	switch len(list.Items) {
	case 0:
		return nil, fmt.Errorf("Machine with hostname %q in %s: %w", hostname, c.namespace, ErrNotFound)
	case 1:
		return &list.Items[0], nil
	default:
		names := make([]string, 0, len(list.Items))
		for _, machine := range list.Items {
			names = append(names, machine.Name)
		}
		return nil, fmt.Errorf("hostname %q of Machines %s in %s: %w", hostname, strings.Join(names, ", "), c.namespace, ErrAmbiguousHostname)
	}
}

// MachineNamesByHostname names every Machine in the cache whose guest hostname is hostname.
func (c *Client) MachineNamesByHostname(ctx context.Context, hostname string) ([]string, error) {
	list := &computev1alpha1.MachineList{}
	if err := c.cache.List(ctx, list, client.InNamespace(c.namespace), client.MatchingFields{indexMachineHostname: hostname}); err != nil {
		return nil, fmt.Errorf("list Machines with hostname %q: %w", hostname, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, machine := range list.Items {
		names = append(names, machine.Name)
	}
	return names, nil
}

// LiveMachine reads the named Machine from the API server.
func (c *Client) LiveMachine(ctx context.Context, name string) (*computev1alpha1.Machine, error) {
	machine := &computev1alpha1.Machine{}
	if err := c.api.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, machine); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("Machine %s/%s: %w", c.namespace, name, ErrNotFound)
		}
		return nil, fmt.Errorf("read Machine %s/%s: %w", c.namespace, name, err)
	}
	return machine, nil
}

// MachinePool returns the named (cluster-scoped) MachinePool from the cache.
func (c *Client) MachinePool(ctx context.Context, name string) (*computev1alpha1.MachinePool, error) {
	pool := &computev1alpha1.MachinePool{}
	if err := c.getCached(ctx, "MachinePool", "", name, pool); err != nil {
		return nil, err
	}
	return pool, nil
}
