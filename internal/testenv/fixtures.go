package testenv

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// PrimaryNIC is the name of the NetworkInterface entry of fixture Machines.
const PrimaryNIC = "primary"

// MachineOptions describe a Machine like those a cluster's Nodes run on: one ephemeral
// NetworkInterface on the cluster Network with an IPv4 address from the node prefix.
type MachineOptions struct {
	// Pool pins the Machine to a MachinePool; empty lets IronCore's scheduler choose.
	Pool string
	// Unschedulable asks for a pool no one has, so the Machine stays unscheduled.
	Unschedulable bool
	// DualStack adds an IPv6 address.
	DualStack bool
	// VirtualIP adds a public virtual IP.
	VirtualIP bool
	// Hostname sets the guest hostname.
	Hostname string
	// PowerOff creates the Machine powered off.
	PowerOff bool
	// Network is the NetworkInterface's Network; empty means the cluster Network.
	Network string
}

// NetworkInterfaceName is the name of the fixture Machine's NetworkInterface object.
func NetworkInterfaceName(machine string) string {
	return computev1alpha1.MachineEphemeralNetworkInterfaceName(machine, PrimaryNIC)
}

// CreateMachine creates a Machine in the stack's namespace.
func (s *Stack) CreateMachine(ctx context.Context, name string, opts MachineOptions) (*computev1alpha1.Machine, error) {
	nicSpec := networkingv1alpha1.NetworkInterfaceSpec{
		NetworkRef: corev1.LocalObjectReference{Name: cmp.Or(opts.Network, s.Network)},
		IPs:        []networkingv1alpha1.IPSource{ephemeralIP(corev1.IPv4Protocol, NodePrefixV4)},
	}
	if opts.DualStack {
		nicSpec.IPs = append(nicSpec.IPs, ephemeralIP(corev1.IPv6Protocol, NodePrefixV6))
	}
	if opts.VirtualIP {
		nicSpec.VirtualIP = &networkingv1alpha1.VirtualIPSource{Ephemeral: &networkingv1alpha1.EphemeralVirtualIPSource{
			VirtualIPTemplate: &networkingv1alpha1.VirtualIPTemplateSpec{Spec: networkingv1alpha1.EphemeralVirtualIPSpec{
				VirtualIPSpec: networkingv1alpha1.VirtualIPSpec{Type: networkingv1alpha1.VirtualIPTypePublic, IPFamily: corev1.IPv4Protocol},
			}},
		}}
	}
	machine := &computev1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec: computev1alpha1.MachineSpec{
			MachineClassRef: corev1.LocalObjectReference{Name: MachineClass},
			NetworkInterfaces: []computev1alpha1.NetworkInterface{{
				Name: PrimaryNIC,
				NetworkInterfaceSource: computev1alpha1.NetworkInterfaceSource{Ephemeral: &computev1alpha1.EphemeralNetworkInterfaceSource{
					NetworkInterfaceTemplate: &networkingv1alpha1.NetworkInterfaceTemplateSpec{Spec: nicSpec},
				}},
			}},
		},
	}
	if opts.Pool != "" {
		machine.Spec.MachinePoolRef = &corev1.LocalObjectReference{Name: opts.Pool}
	}
	if opts.Unschedulable {
		machine.Spec.MachinePoolSelector = map[string]string{"example.org/no-such-pool": "true"}
	}
	if opts.Hostname != "" {
		machine.Spec.GuestConfig = &computev1alpha1.MachineGuestConfig{Hostname: opts.Hostname}
	}
	if opts.PowerOff {
		machine.Spec.Power = computev1alpha1.PowerOff
	}
	if err := s.IronCore.Client.Create(ctx, machine); err != nil {
		return nil, fmt.Errorf("create Machine %s: %w", name, err)
	}
	return machine, nil
}

func ephemeralIP(family corev1.IPFamily, parent string) networkingv1alpha1.IPSource {
	return networkingv1alpha1.IPSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
		PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{Spec: ipamv1alpha1.PrefixSpec{
			IPFamily:  family,
			ParentRef: &corev1.LocalObjectReference{Name: parent},
		}},
	}}
}

// NodeOptions describe how a kubelet registers a Node.
type NodeOptions struct {
	// ProviderID is set when the kubelet was given --provider-id.
	ProviderID string
	// PodCIDRs are the Node's pod CIDRs.
	PodCIDRs []string
	// Labels are extra labels.
	Labels map[string]string
	// NotReady registers the Node as a kubelet does on its first start, before its Node is
	// ready: Ready False.
	NotReady bool
}

// CreateNode registers a Node as a kubelet with --cloud-provider=external does: tainted as
// not yet initialized by the cloud provider, and Ready (unless opts.NotReady).
func (s *Stack) CreateNode(ctx context.Context, name string, opts NodeOptions) (*corev1.Node, error) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: opts.Labels},
		Spec: corev1.NodeSpec{
			ProviderID: opts.ProviderID,
			PodCIDRs:   opts.PodCIDRs,
			Taints: []corev1.Taint{{
				Key:    cloudproviderapi.TaintExternalCloudProvider,
				Value:  "true",
				Effect: corev1.TaintEffectNoSchedule,
			}},
		},
	}
	if len(opts.PodCIDRs) > 0 {
		node.Spec.PodCIDR = opts.PodCIDRs[0]
	}
	created, err := s.TargetClientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Node %s: %w", name, err)
	}
	if opts.NotReady {
		return s.SetNodeReady(ctx, created.Name, corev1.ConditionFalse)
	}
	return s.SetNodeReady(ctx, created.Name, corev1.ConditionTrue)
}

// SetNodeReady sets the Node's Ready condition, as its kubelet (or, when the kubelet stops
// reporting, the node lifecycle controller) would. It patches only that condition, so it does
// not race with the CCM's writes to the Node.
func (s *Stack) SetNodeReady(ctx context.Context, name string, status corev1.ConditionStatus) (*corev1.Node, error) {
	return s.SetNodeReadySince(ctx, name, status, time.Now())
}

// SetNodeReadySince is SetNodeReady with the condition's last transition at since, as for a
// Node whose condition changed that long ago.
func (s *Stack) SetNodeReadySince(ctx context.Context, name string, status corev1.ConditionStatus, since time.Time) (*corev1.Node, error) {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.NewTime(since), Reason: "Simulated",
	}}}})
	if err != nil {
		return nil, err
	}
	node, err := s.TargetClientset.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("set Node %s Ready=%s: %w", name, status, err)
	}
	return node, nil
}

// ServiceOptions describe a Service of type LoadBalancer.
type ServiceOptions struct {
	// Namespace defaults to "default".
	Namespace string
	// DualStack asks for IPv4 and IPv6.
	DualStack bool
	// Annotations are set on the Service.
	Annotations map[string]string
	// LoadBalancerIP is spec.loadBalancerIP.
	LoadBalancerIP string
	// Ports default to TCP 80.
	Ports []corev1.ServicePort
	// ExternalTrafficPolicy defaults to Cluster.
	ExternalTrafficPolicy corev1.ServiceExternalTrafficPolicy
	// AllocateLoadBalancerNodePorts is spec.allocateLoadBalancerNodePorts; nil means true.
	AllocateLoadBalancerNodePorts *bool
	// LoadBalancerClass is spec.loadBalancerClass; empty means none.
	LoadBalancerClass string
}

// CreateLoadBalancerService creates a Service of type LoadBalancer in the target cluster.
func (s *Stack) CreateLoadBalancerService(ctx context.Context, name string, opts ServiceOptions) (*corev1.Service, error) {
	if opts.Namespace == "" {
		opts.Namespace = metav1.NamespaceDefault
	}
	if len(opts.Ports) == 0 {
		opts.Ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: name, Annotations: opts.Annotations},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeLoadBalancer,
			Selector:       map[string]string{"app": name},
			Ports:          opts.Ports,
			LoadBalancerIP: opts.LoadBalancerIP,

			ExternalTrafficPolicy:         opts.ExternalTrafficPolicy,
			AllocateLoadBalancerNodePorts: opts.AllocateLoadBalancerNodePorts,
		},
	}
	if opts.LoadBalancerClass != "" {
		service.Spec.LoadBalancerClass = &opts.LoadBalancerClass
	}
	if opts.DualStack {
		policy := corev1.IPFamilyPolicyRequireDualStack
		service.Spec.IPFamilyPolicy = &policy
		service.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
	created, err := s.TargetClientset.CoreV1().Services(opts.Namespace).Create(ctx, service, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Service %s/%s: %w", opts.Namespace, name, err)
	}
	return created, nil
}

// SetNodeAddresses replaces the Node's addresses, as the CCM does when it initializes a Node.
// A merge patch replaces the whole list; a strategic one would merge InternalIPs by type.
func (s *Stack) SetNodeAddresses(ctx context.Context, name string, addresses []corev1.NodeAddress) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": addresses}})
	if err != nil {
		return err
	}
	if _, err := s.TargetClientset.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("set addresses of Node %s: %w", name, err)
	}
	return nil
}

// Endpoint is one endpoint of a Service on a Node, with its EndpointSlice conditions.
type Endpoint struct {
	IP          string
	Node        string
	Ready       bool
	Serving     bool
	Terminating bool
}

// SetEndpoints makes the Service's one EndpointSlice hold exactly the endpoints, as the
// EndpointSlice controller writes them (there are no kubelets or Pods in the stack).
func (s *Stack) SetEndpoints(ctx context.Context, service *corev1.Service, endpoints []Endpoint) error {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: service.Namespace,
			Name:      service.Name + "-sim",
			Labels: map[string]string{
				discoveryv1.LabelServiceName: service.Name,
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, port := range service.Spec.Ports {
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(port.Name), Protocol: ptr.To(port.Protocol), Port: ptr.To(port.TargetPort.IntVal)})
	}
	for _, endpoint := range endpoints {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{endpoint.IP},
			NodeName:  ptr.To(endpoint.Node),
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(endpoint.Ready), Serving: ptr.To(endpoint.Serving), Terminating: ptr.To(endpoint.Terminating),
			},
		})
	}
	slices := s.TargetClientset.DiscoveryV1().EndpointSlices(service.Namespace)
	existing, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.ResourceVersion = existing.ResourceVersion
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("set the endpoints of Service %s/%s: %w", service.Namespace, service.Name, err)
	}
	return nil
}

// ListIronCore lists each kind of the lists in the stack's IronCore namespace, with the
// options besides.
func (s *Stack) ListIronCore(ctx context.Context, lists []client.ObjectList, opts ...client.ListOption) error {
	opts = append([]client.ListOption{client.InNamespace(s.Namespace)}, opts...)
	for _, list := range lists {
		if err := s.IronCore.Client.List(ctx, list, opts...); err != nil {
			return err
		}
	}
	return nil
}

// AllocatePodCIDR appends a pod CIDR entry for the family to the named NetworkInterface as the
// CCM's node IPAM controller writes it (the template's labels and IronCore's ephemeral-managed-by
// annotation; the cluster label on the NetworkInterface), waits until IronCore has allocated
// its Prefix from parent, and returns the Prefix.
func (s *Stack) AllocatePodCIDR(ctx context.Context, nicName, parent string, family corev1.IPFamily, length int32) (*ipamv1alpha1.Prefix, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := s.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: nicName}, nic); err != nil {
		return nil, err
	}
	base := nic.DeepCopy()
	if nic.Labels == nil {
		nic.Labels = map[string]string{}
	}
	nic.Labels[keys.LabelCluster] = s.ClusterName
	index := len(nic.Spec.Prefixes)
	nic.Spec.Prefixes = append(nic.Spec.Prefixes, networkingv1alpha1.PrefixSource{Ephemeral: &networkingv1alpha1.EphemeralPrefixSource{
		PrefixTemplate: &ipamv1alpha1.PrefixTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{
				Labels:      map[string]string{keys.LabelCluster: s.ClusterName, keys.LabelPodCIDR: string(family)},
				Annotations: map[string]string{"common.ironcore.dev/ephemeral-managed-by": "ephemeral-manager"},
			},
			Spec: ipamv1alpha1.PrefixSpec{IPFamily: family, PrefixLength: length, ParentRef: &corev1.LocalObjectReference{Name: parent}},
		},
	}})
	if err := s.IronCore.Client.Patch(ctx, nic, client.MergeFrom(base)); err != nil {
		return nil, fmt.Errorf("add a pod CIDR entry to NetworkInterface %s: %w", nicName, err)
	}
	prefix := &ipamv1alpha1.Prefix{}
	key := client.ObjectKey{Namespace: s.Namespace, Name: networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nicName, index)}
	err := WaitFor(ctx, time.Minute, "IronCore to allocate Prefix "+key.Name, func(ctx context.Context) error {
		if err := s.IronCore.Client.Get(ctx, key, prefix); err != nil {
			return err
		}
		if prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated || prefix.Spec.Prefix == nil {
			return fmt.Errorf("phase %q", prefix.Status.Phase)
		}
		return nil
	})
	return prefix, err
}
