package podcidrs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
)

// errNoLongerUnused stops a release whose NetworkInterface has come into use again.
var errNoLongerUnused = errors.New("the NetworkInterface is in use again")

// ReleaseUnusedPodCIDRs removes the pod CIDR entries of NetworkInterfaces whose Machine has no Node,
// and of NetworkInterfaces no Machine uses (IronCore clears a NetworkInterface's machineRef
// once its Machine is gone), and returns what it removed. The NetworkInterfaces are read before
// the Nodes: an entry is added only for a Node the cache already shows, so a Node listed after
// its NetworkInterface is never missed. Each removal checks again, on the NetworkInterface it
// writes and the Nodes known then, that the Machine is the same and still has no Node.
func (a *Allocator) ReleaseUnusedPodCIDRs(ctx context.Context) ([]nodeipam.Released, error) {
	nics, err := a.ironcore.NetworkInterfacesOfCluster(ctx, a.cluster, a.network)
	if err != nil {
		return nil, err
	}
	nodesOnMachine, err := a.nodesByMachine(ctx)
	if err != nil {
		return nil, err
	}
	used, err := a.ironcore.NetworkInterfacesReferencedByMachines(ctx)
	if err != nil {
		return nil, err
	}
	var released []nodeipam.Released
	var errs []error
	for i := range nics {
		nic := &nics[i]
		entries := ironcore.PodCIDREntries(nic, a.cluster)
		if len(entries) == 0 || !a.unused(nic, nodesOnMachine, used) {
			continue
		}
		machine := machineOf(nic)
		remove := map[int]string{}
		for _, entry := range entries {
			cidr, _, _ := a.ironcore.AllocatedPodCIDR(ctx, a.cluster, nic, entry)
			remove[entry.Index] = describeEntry(entry, cidr)
		}
		cidrs, err := a.removeEntries(ctx, nic.Name, remove, func(current *networkingv1alpha1.NetworkInterface) error {
			nodesOnMachine, err := a.nodesByMachine(ctx)
			if err != nil {
				return err
			}
			if machineOf(current) != machine || !a.unused(current, nodesOnMachine, used) {
				return errNoLongerUnused
			}
			return nil
		})
		switch {
		case errors.Is(err, ironcore.ErrNotFound) || apierrors.IsNotFound(err):
			continue // deleted with its Machine, and its Prefixes with it
		case errors.Is(err, errNoLongerUnused):
			klog.InfoS("Kept pod CIDRs: the Machine has a Node again", "networkInterface", klog.KObj(nic))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("release the pod CIDRs of NetworkInterface %s: %w", nic.Name, err))
			continue
		}
		if len(cidrs) > 0 {
			released = append(released, nodeipam.Released{NetworkInterface: nic.Name, Machine: machine, CIDRs: cidrs})
			klog.InfoS("Released pod CIDRs: no Node uses them", "machine", klog.KRef(a.ironcore.Namespace(), machine),
				"networkInterface", klog.KObj(nic), "cidrs", strings.Join(cidrs, ","))
		}
	}
	return released, errors.Join(errs...)
}

// unused tells whether no Node can be using the NetworkInterface's pod CIDRs: its Machine has
// no Node, not even one that only may run on it, or it has no Machine and no Machine lists it.
func (a *Allocator) unused(nic *networkingv1alpha1.NetworkInterface, nodesByMachine map[string][]*corev1.Node, usedByMachines map[string]bool) bool {
	if nic.Spec.MachineRef == nil {
		return !usedByMachines[nic.Name]
	}
	return len(nodesByMachine[nic.Spec.MachineRef.Name]) == 0
}

func machineOf(nic *networkingv1alpha1.NetworkInterface) string {
	if nic.Spec.MachineRef == nil {
		return ""
	}
	return nic.Spec.MachineRef.Name
}
