package provider

import (
	"context"
	"errors"
	"fmt"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodelabels"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
)

// errNotReady is wrapped when a Machine exists but IronCore has not yet filled in what a Node
// needs (scheduling, NIC addresses). The framework retries; the Node stays uninitialized.
var errNotReady = errors.New("not ready")

// ReasonMachinePoolLabelSkipped is the reason of the Warning event on a Node whose MachinePool
// name cannot be a label value, so the Node does not get the keys.LabelMachinePool label.
const ReasonMachinePoolLabelSkipped = "MachinePoolLabelSkipped"

// instances implements InstancesV2 from the Machines of one IronCore namespace. It only reads
// IronCore; it records events on Nodes.
type instances struct {
	ironcore *ironcore.Client
	// network is the cluster Network; its NetworkInterfaces' addresses are listed first.
	network string
	// recorder records events on Nodes; nil records none.
	recorder record.EventRecorder
	// nodeLabels are the Machine label keys copied to its Node.
	nodeLabels nodelabels.AllowList
}

// InstanceExists reports false only when the Machine is confirmed gone by the API server;
// every other failure is an error, so that the node lifecycle controller never deletes a Node
// because IronCore could not be asked.
func (i *instances) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	_, err := i.ironcore.MachineForNode(ctx, node)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ironcore.ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

// InstanceShutdown reports whether the Machine is shut down or on its way out: state Shutdown,
// Terminating or Terminated, or deletion requested.
func (i *instances) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	machine, err := i.ironcore.MachineForNode(ctx, node)
	if err != nil {
		return false, err
	}
	return MachineIsShutdown(machine), nil
}

// MachineIsShutdown is the Node shutdown rule: the Machine is not running and is not about to.
func MachineIsShutdown(machine *computev1alpha1.Machine) bool {
	if machine.DeletionTimestamp != nil {
		return true
	}
	switch machine.Status.State {
	case computev1alpha1.MachineStateShutdown, computev1alpha1.MachineStateTerminating, computev1alpha1.MachineStateTerminated:
		return true
	default:
		return false
	}
}

// InstanceMetadata describes the Node's Machine. It returns an errNotReady error, never partial
// metadata, while the Machine is unscheduled or its NetworkInterface on the cluster Network has
// no IPs yet. NetworkInterfaces on other Networks do not hold the Node back: their addresses
// are listed once they have them.
func (i *instances) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	machine, err := i.ironcore.MachineForNode(ctx, node)
	if err != nil {
		return nil, err
	}
	if machine.Spec.MachinePoolRef == nil || machine.Spec.MachinePoolRef.Name == "" {
		return nil, fmt.Errorf("Machine %s is not scheduled on a MachinePool yet: %w", machineKey(machine), errNotReady)
	}
	pool, err := i.ironcore.MachinePool(ctx, machine.Spec.MachinePoolRef.Name)
	if err != nil {
		return nil, fmt.Errorf("MachinePool of Machine %s: %w", machineKey(machine), err)
	}
	nics, err := i.networkInterfaces(ctx, machine)
	if err != nil {
		return nil, err
	}
	zone, region := Topology(pool)
	labels, err := nodelabels.PoolLabels(pool.Name)
	if err != nil {
		// A label is a convenience; the Node must not stay uninitialized for want of it.
		klog.V(2).InfoS("Not labelling Node with its MachinePool", "node", klog.KObj(node), "machinePool", klog.KObj(pool), "reason", err)
		if i.recorder != nil {
			i.recorder.Eventf(node, corev1.EventTypeWarning, ReasonMachinePoolLabelSkipped,
				"Not setting label %s: %v", keys.LabelMachinePool, err)
		}
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:       providerid.ID{Namespace: machine.Namespace, Machine: machine.Name}.String(),
		InstanceType:     machine.Spec.MachineClassRef.Name,
		NodeAddresses:    NodeAddresses(machine, nics, i.network),
		Zone:             zone,
		Region:           region,
		AdditionalLabels: nodelabels.FromIronCore(labels, machine, pool, i.nodeLabels),
	}, nil
}

// Topology returns the zone and region of a MachinePool from its topology labels; the zone
// falls back to the pool's name, as with the reference CCM.
func Topology(pool *computev1alpha1.MachinePool) (zone, region string) {
	zone = pool.Labels[string(commonv1alpha1.TopologyLabelZone)]
	if zone == "" {
		zone = pool.Name
	}
	return zone, pool.Labels[string(commonv1alpha1.TopologyLabelRegion)]
}

// networkInterfaces returns the Machine's NetworkInterfaces that have IPs, in spec order. Only
// those on the cluster Network, where the Node is reached, are waited for; another Network's
// addresses come with a later node sync. A referenced interface that does not exist yet is
// waited for only while none on the cluster Network has IPs.
func (i *instances) networkInterfaces(ctx context.Context, machine *computev1alpha1.Machine) ([]networkingv1alpha1.NetworkInterface, error) {
	if len(computev1alpha1.MachineNetworkInterfaceNames(machine)) == 0 {
		return nil, fmt.Errorf("Machine %s has no network interfaces", machineKey(machine))
	}
	var (
		nics []networkingv1alpha1.NetworkInterface
		// waiting are the reasons to wait for the cluster Network's interface; unknown are
		// missing interfaces whose Network is unknown.
		waiting, unknown []error
		clusterReady     bool
	)
	for _, machineNIC := range machine.Spec.NetworkInterfaces {
		name := computev1alpha1.MachineNetworkInterfaceName(machine.Name, machineNIC)
		if name == "" {
			continue
		}
		nic, err := i.ironcore.NetworkInterface(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			missing := fmt.Errorf("NetworkInterface %s of Machine %s does not exist yet: %w", name, machineKey(machine), errNotReady)
			switch network := templateNetwork(machineNIC); network {
			case i.network:
				waiting = append(waiting, missing)
			case "":
				unknown = append(unknown, missing)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		onCluster := nic.Spec.NetworkRef.Name == i.network
		if ref := nic.Spec.MachineRef; ref != nil && ref.Name != machine.Name {
			if onCluster {
				return nil, fmt.Errorf("NetworkInterface %s of Machine %s is claimed by Machine %s", name, machineKey(machine), ref.Name)
			}
			continue
		}
		if len(nic.Status.IPs) == 0 {
			if onCluster {
				waiting = append(waiting, fmt.Errorf("NetworkInterface %s of Machine %s has no IPs yet: %w", name, machineKey(machine), errNotReady))
			}
			continue
		}
		clusterReady = clusterReady || onCluster
		nics = append(nics, *nic)
	}
	switch {
	case len(waiting) > 0:
		return nil, waiting[0]
	case clusterReady:
		return nics, nil
	case len(unknown) > 0:
		return nil, unknown[0]
	default:
		return nil, fmt.Errorf("Machine %s has no NetworkInterface on the cluster Network %s", machineKey(machine), i.network)
	}
}

// templateNetwork is the Network of an ephemeral NetworkInterface as the Machine's spec gives
// it, or "" for a referenced one, whose Network only the NetworkInterface itself tells.
func templateNetwork(machineNIC computev1alpha1.NetworkInterface) string {
	if machineNIC.Ephemeral == nil || machineNIC.Ephemeral.NetworkInterfaceTemplate == nil {
		return ""
	}
	return machineNIC.Ephemeral.NetworkInterfaceTemplate.Spec.NetworkRef.Name
}

// NodeAddresses lists a Machine's addresses in a stable order, so the Node's addresses do not
// churn: cluster Network InternalIPs first, then other Networks', ExternalIPs, and the Hostname
// (the guest hostname, else the Machine name).
func NodeAddresses(machine *computev1alpha1.Machine, nics []networkingv1alpha1.NetworkInterface, clusterNetwork string) []corev1.NodeAddress {
	var internal, other, external []corev1.NodeAddress
	seen := map[corev1.NodeAddress]bool{}
	add := func(list *[]corev1.NodeAddress, addressType corev1.NodeAddressType, ip commonv1alpha1.IP) {
		address := corev1.NodeAddress{Type: addressType, Address: ip.String()}
		if !ip.IsValid() || seen[address] {
			return
		}
		seen[address] = true
		*list = append(*list, address)
	}
	for _, nic := range nics {
		list := &other
		if nic.Spec.NetworkRef.Name == clusterNetwork {
			list = &internal
		}
		for _, ip := range nic.Status.IPs {
			add(list, corev1.NodeInternalIP, ip)
		}
		if nic.Status.VirtualIP != nil {
			add(&external, corev1.NodeExternalIP, *nic.Status.VirtualIP)
		}
	}
	hostname := machine.Name
	if machine.Spec.GuestConfig != nil && machine.Spec.GuestConfig.Hostname != "" {
		hostname = machine.Spec.GuestConfig.Hostname
	}
	addresses := append(append(internal, other...), external...)
	return append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: hostname})
}

func machineKey(machine *computev1alpha1.Machine) string {
	return machine.Namespace + "/" + machine.Name
}
