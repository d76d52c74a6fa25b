package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
)

// ReleaseUnused removes the pod CIDR entries of NetworkInterfaces whose Machine has no Node,
// and of NetworkInterfaces no Machine uses (IronCore clears a NetworkInterface's machineRef
// once its Machine is gone), and returns what it removed. The NetworkInterfaces are read before
// the Nodes: an entry is added only for a Node the cache already shows, so a Node listed after
// its NetworkInterface is never missed. Each removal checks again, on the NetworkInterface it
// writes and the Nodes known then, that the Machine is the same and still has no Node.
func (p *podCIDRs) ReleaseUnused(ctx context.Context) ([]nodeipam.Released, error) {
	nics, err := p.ironcore.NetworkInterfacesOfCluster(ctx, p.cluster, p.routes.network)
	if err != nil {
		return nil, err
	}
	nodeOfMachine, err := p.routes.nodesByMachine(ctx)
	if err != nil {
		return nil, err
	}
	used, err := p.ironcore.NetworkInterfacesReferencedByMachines(ctx)
	if err != nil {
		return nil, err
	}
	var released []nodeipam.Released
	var errs []error
	for i := range nics {
		nic := &nics[i]
		entries := podCIDREntries(nic, p.cluster)
		if len(entries) == 0 || !p.unused(nic, nodeOfMachine, used) {
			continue
		}
		machine := machineOf(nic)
		remove := map[int]string{}
		for _, entry := range entries {
			cidr, _, _ := allocatedPodCIDR(ctx, p.ironcore, p.cluster, nic, entry)
			remove[entry.index] = describeEntry(entry, cidr)
		}
		cidrs, err := p.removeEntries(ctx, nic.Name, remove, func(current *networkingv1alpha1.NetworkInterface) error {
			nodeOfMachine, err := p.routes.nodesByMachine(ctx)
			if err != nil {
				return err
			}
			if machineOf(current) != machine || !p.unused(current, nodeOfMachine, used) {
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
			klog.InfoS("Released pod CIDRs: no Node uses them", "machine", klog.KRef(p.ironcore.Namespace(), machine),
				"networkInterface", klog.KObj(nic), "cidrs", strings.Join(cidrs, ","))
		}
	}
	return released, errors.Join(errs...)
}

// errNoLongerUnused stops a release whose NetworkInterface has come into use again.
var errNoLongerUnused = errors.New("the NetworkInterface is in use again")

// unused tells whether no Node can be using the NetworkInterface's pod CIDRs: its Machine has
// no Node, or it has no Machine and no Machine lists it.
func (p *podCIDRs) unused(nic *networkingv1alpha1.NetworkInterface, nodeOfMachine map[string]*corev1.Node, usedByMachines map[string]bool) bool {
	if nic.Spec.MachineRef == nil {
		return !usedByMachines[nic.Name]
	}
	return nodeOfMachine[nic.Spec.MachineRef.Name] == nil
}

func machineOf(nic *networkingv1alpha1.NetworkInterface) string {
	if nic.Spec.MachineRef == nil {
		return ""
	}
	return nic.Spec.MachineRef.Name
}

// Diagnose tells, with live reads, why IronCore may not allocate a pod CIDR of the family: its
// parent is missing, of the wrong family, or full. It returns "" when it finds no reason.
func (p *podCIDRs) Diagnose(ctx context.Context, family corev1.IPFamily) string {
	for _, f := range p.families {
		if f.Family == family {
			return p.parentProblem(ctx, f)
		}
	}
	return ""
}

func (p *podCIDRs) parentProblem(ctx context.Context, family config.PodCIDRFamily) string {
	parents, err := p.ironcore.ParentPrefixes(ctx, family.ParentPrefix, family.ParentLabels)
	if err != nil {
		return fmt.Sprintf("%s: %v", family.ParentKey, err)
	}
	var names, notAllocated []string
	for i := range parents {
		parent := &parents[i]
		if actual := ironcore.PrefixFamily(parent); actual != family.Family {
			if family.ParentPrefix != "" {
				return fmt.Sprintf("%s: IronCore Prefix %s is %s, not %s", family.ParentKey, parent.Name, actual, family.Family)
			}
			continue
		}
		if parent.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated {
			notAllocated = append(notAllocated, fmt.Sprintf("%s (phase %q)", parent.Name, parent.Status.Phase))
			continue
		}
		if ironcore.HasRoomFor(parent, family.MaskSize) {
			return ""
		}
		names = append(names, fmt.Sprintf("%s (%s)", parent.Name, parent.Spec.Prefix))
	}
	if len(names) == 0 && len(notAllocated) > 0 {
		return fmt.Sprintf("%s: the parent %s is not allocated yet", family.ParentKey, strings.Join(notAllocated, ", "))
	}
	if len(names) == 0 {
		return fmt.Sprintf("%s: no %s Prefix labelled %v exists", family.ParentKey, family.Family, family.ParentLabels)
	}
	return fmt.Sprintf("%s: no free /%d is left in %s; allocation resumes when space is freed or a parent is added",
		family.ParentKey, family.MaskSize, strings.Join(names, ", "))
}

// Check confirms at start that every family's parent exists, is of the family, and is larger
// than the pod CIDRs cut from it.
func (p *podCIDRs) Check(ctx context.Context) error {
	if err := p.ironcore.CheckPodCIDRPrefixesReadable(ctx); err != nil {
		return err
	}
	var errs []error
	for _, family := range p.families {
		parents, err := p.ironcore.ParentPrefixes(ctx, family.ParentPrefix, family.ParentLabels)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", family.ParentKey, err))
			continue
		}
		fits := 0
		for i := range parents {
			parent := &parents[i]
			actual := ironcore.PrefixFamily(parent)
			switch {
			case family.ParentPrefix != "" && actual != "" && actual != family.Family:
				errs = append(errs, fmt.Errorf("%s: IronCore Prefix %s is %s, not %s", family.ParentKey, parent.Name, actual, family.Family))
			case actual != family.Family:
			case parent.Spec.Prefix != nil && parent.Spec.Prefix.IsValid() && parent.Spec.Prefix.Bits() >= family.MaskSize:
				if family.ParentPrefix != "" {
					errs = append(errs, fmt.Errorf("%s: IronCore Prefix %s (%s) is not larger than the pod CIDRs (/%d, %s) cut from it",
						family.ParentKey, parent.Name, parent.Spec.Prefix, family.MaskSize, family.MaskSizeKey))
				}
			default:
				fits++
			}
		}
		if family.ParentPrefix == "" && fits == 0 {
			errs = append(errs, fmt.Errorf("%s: no %s Prefix labelled %v larger than /%d exists in the namespace",
				family.ParentKey, family.Family, family.ParentLabels, family.MaskSize))
		}
	}
	return errors.Join(errs...)
}
