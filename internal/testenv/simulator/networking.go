package simulator

import (
	"context"
	"fmt"
	"net/netip"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func (s *Simulator) setupNetworks(mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("simulator-network").
		WithOptions(options).
		WatchesRawSource(s.pokeSource()).
		For(&networkingv1alpha1.Network{}).
		Complete(reconcile.Func(s.reconcileNetwork))
}

// reconcileNetwork gives a Network a provider ID and reports it Available (or Error if broken).
func (s *Simulator) reconcileNetwork(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	network := &networkingv1alpha1.Network{}
	if err := s.client.Get(ctx, req.NamespacedName, network); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.flagged(s.held, network) || network.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	if network.Spec.ProviderID == "" {
		base := network.DeepCopy()
		network.Spec.ProviderID = "sim://" + string(network.UID)
		if err := s.client.Patch(ctx, network, client.MergeFrom(base)); err != nil {
			return reconcile.Result{}, err
		}
	}
	state := networkingv1alpha1.NetworkStateAvailable
	if s.flagged(s.broken, network) {
		state = networkingv1alpha1.NetworkStateError
	}
	if network.Status.State == state {
		return reconcile.Result{}, nil
	}
	return s.applyAfterLatency(network, func() error {
		network.Status.State = state
		return s.client.Status().Update(ctx, network)
	})
}

func (s *Simulator) setupNetworkInterfaces(mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("simulator-networkinterface").
		WithOptions(options).
		WatchesRawSource(s.pokeSource()).
		For(&networkingv1alpha1.NetworkInterface{}).
		Owns(&ipamv1alpha1.Prefix{}).
		Watches(&networkingv1alpha1.VirtualIP{}, handler.EnqueueRequestsFromMapFunc(targetOfVirtualIP)).
		Complete(reconcile.Func(s.reconcileNetworkInterface))
}

func targetOfVirtualIP(_ context.Context, obj client.Object) []reconcile.Request {
	vip := obj.(*networkingv1alpha1.VirtualIP)
	if vip.Spec.TargetRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: vip.Namespace, Name: vip.Spec.TargetRef.Name}}}
}

// reconcileNetworkInterface plays apinetlet: an interface attached to a Machine (it has a
// provider handle) becomes Available with its IPs, prefixes and virtual IP resolved from its
// spec; a detached one goes back to Pending with everything cleared.
func (s *Simulator) reconcileNetworkInterface(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := s.client.Get(ctx, req.NamespacedName, nic); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.flagged(s.held, nic) || nic.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	status, err := s.networkInterfaceStatus(ctx, nic)
	if err != nil {
		return reconcile.Result{}, err
	}
	if status.State == nic.Status.State {
		status.LastStateTransitionTime = nic.Status.LastStateTransitionTime
	} else {
		status.LastStateTransitionTime = &metav1.Time{Time: metav1.Now().Rfc3339Copy().Time}
	}
	if equality.Semantic.DeepEqual(status, &nic.Status) {
		return reconcile.Result{}, nil
	}
	return s.applyAfterLatency(nic, func() error {
		nic.Status = *status
		return s.client.Status().Update(ctx, nic)
	})
}

func (s *Simulator) networkInterfaceStatus(ctx context.Context, nic *networkingv1alpha1.NetworkInterface) (*networkingv1alpha1.NetworkInterfaceStatus, error) {
	pending := &networkingv1alpha1.NetworkInterfaceStatus{State: networkingv1alpha1.NetworkInterfaceStatePending}
	if nic.Spec.MachineRef == nil || nic.Spec.ProviderID == "" {
		return pending, nil
	}
	if s.flagged(s.broken, nic) {
		return &networkingv1alpha1.NetworkInterfaceStatus{State: networkingv1alpha1.NetworkInterfaceStateError}, nil
	}
	status := &networkingv1alpha1.NetworkInterfaceStatus{State: networkingv1alpha1.NetworkInterfaceStateAvailable}
	for i, source := range nic.Spec.IPs {
		prefix, ok, err := s.resolve(ctx, nic, hostPrefix(source.Value), networkingv1alpha1.NetworkInterfaceIPIPAMPrefixName(nic.Name, i), source.Ephemeral != nil)
		if err != nil || !ok {
			return pending, err
		}
		status.IPs = append(status.IPs, commonv1alpha1.IP{Addr: prefix.Addr()})
	}
	// Like apinetlet, push the prefixes that resolve and leave out those that do not yet.
	for i, source := range nic.Spec.Prefixes {
		var value *netip.Prefix
		if source.Value != nil {
			value = &source.Value.Prefix
		}
		prefix, ok, err := s.resolve(ctx, nic, value, networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nic.Name, i), source.Ephemeral != nil)
		if err != nil {
			return nil, err
		}
		if ok {
			status.Prefixes = append(status.Prefixes, commonv1alpha1.IPPrefix{Prefix: prefix})
		}
	}
	if nic.Spec.VirtualIP != nil {
		vip := &networkingv1alpha1.VirtualIP{}
		name := networkingv1alpha1.NetworkInterfaceVirtualIPName(nic.Name, *nic.Spec.VirtualIP)
		err := s.client.Get(ctx, client.ObjectKey{Namespace: nic.Namespace, Name: name}, vip)
		switch {
		case err == nil && vip.Status.IP != nil && vip.Spec.TargetRef != nil && vip.Spec.TargetRef.UID == nic.UID:
			status.VirtualIP = vip.Status.IP.DeepCopy()
		case err != nil && !apierrors.IsNotFound(err):
			return nil, err
		}
	}
	return status, nil
}

// resolve returns a literal prefix, or the allocated IPAM Prefix of the given name if the
// source is ephemeral. ok is false while the Prefix is not allocated.
func (s *Simulator) resolve(ctx context.Context, owner client.Object, value *netip.Prefix, ephemeralName string, ephemeral bool) (netip.Prefix, bool, error) {
	if !ephemeral {
		if value == nil {
			return netip.Prefix{}, false, fmt.Errorf("%s %s has a source with neither a value nor an ephemeral template", ownerKind(owner), owner.GetName())
		}
		return *value, true, nil
	}
	prefix := &ipamv1alpha1.Prefix{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: owner.GetNamespace(), Name: ephemeralName}, prefix); err != nil {
		return netip.Prefix{}, false, client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(prefix, owner) || prefix.Status.Phase != ipamv1alpha1.PrefixPhaseAllocated || prefix.Spec.Prefix == nil {
		return netip.Prefix{}, false, nil
	}
	return prefix.Spec.Prefix.Prefix, true, nil
}

func ownerKind(obj client.Object) string {
	return fmt.Sprintf("%T", obj)
}

func (s *Simulator) setupVirtualIPs(mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("simulator-virtualip").
		WithOptions(options).
		WatchesRawSource(s.pokeSource()).
		For(&networkingv1alpha1.VirtualIP{}).
		Complete(reconcile.Func(s.reconcileVirtualIP))
}

// reconcileVirtualIP allocates a public address for a VirtualIP once.
func (s *Simulator) reconcileVirtualIP(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vip := &networkingv1alpha1.VirtualIP{}
	if err := s.client.Get(ctx, req.NamespacedName, vip); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.flagged(s.held, vip) || vip.DeletionTimestamp != nil || vip.Status.IP != nil {
		return reconcile.Result{}, nil
	}
	return s.applyAfterLatency(vip, func() error {
		addr, err := s.publicAddress(vip.Spec.IPFamily)
		if err != nil {
			return err
		}
		vip.Status.IP = &commonv1alpha1.IP{Addr: addr}
		return s.client.Status().Update(ctx, vip)
	})
}

func (s *Simulator) publicAddress(family corev1.IPFamily) (netip.Addr, error) {
	if family == corev1.IPv6Protocol {
		return s.publicIPv6.allocate()
	}
	return s.publicIPv4.allocate()
}

// LoadBalancerFinalizer is the finalizer apinetlet puts on LoadBalancers.
const LoadBalancerFinalizer = "apinet.ironcore.dev/loadbalancer"

func (s *Simulator) setupLoadBalancers(mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("simulator-loadbalancer").
		WithOptions(options).
		WatchesRawSource(s.pokeSource()).
		For(&networkingv1alpha1.LoadBalancer{}).
		Owns(&ipamv1alpha1.Prefix{}).
		Complete(reconcile.Func(s.reconcileLoadBalancer))
}

// reconcileLoadBalancer plays apinetlet for a LoadBalancer: a Public one gets one public
// address per IP family, kept for its lifetime; an Internal one reports its literal IPs and
// its allocated ephemeral Prefixes.
func (s *Simulator) reconcileLoadBalancer(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := s.client.Get(ctx, req.NamespacedName, lb); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.flagged(s.held, lb) {
		return reconcile.Result{}, nil
	}
	// Like apinetlet, hold the LoadBalancer's deletion until its provider side is cleaned up.
	if lb.DeletionTimestamp != nil {
		if !controllerutil.ContainsFinalizer(lb, LoadBalancerFinalizer) {
			return reconcile.Result{}, nil
		}
		return s.applyAfterLatency(lb, func() error {
			base := lb.DeepCopy()
			controllerutil.RemoveFinalizer(lb, LoadBalancerFinalizer)
			return client.IgnoreNotFound(s.client.Patch(ctx, lb, client.MergeFrom(base)))
		})
	}
	if !controllerutil.ContainsFinalizer(lb, LoadBalancerFinalizer) {
		base := lb.DeepCopy()
		controllerutil.AddFinalizer(lb, LoadBalancerFinalizer)
		if err := s.client.Patch(ctx, lb, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, err
		}
	}
	var ips []commonv1alpha1.IP
	switch lb.Spec.Type {
	case networkingv1alpha1.LoadBalancerTypePublic:
		for _, family := range lb.Spec.IPFamilies {
			if existing := ipOfFamily(lb.Status.IPs, family); existing != nil {
				ips = append(ips, *existing)
				continue
			}
			addr, err := s.publicAddress(family)
			if err != nil {
				return reconcile.Result{}, err
			}
			ips = append(ips, commonv1alpha1.IP{Addr: addr})
		}
	case networkingv1alpha1.LoadBalancerTypeInternal:
		for i, source := range lb.Spec.IPs {
			prefix, ok, err := s.resolve(ctx, lb, hostPrefix(source.Value), networkingv1alpha1.LoadBalancerIPIPAMPrefixName(lb.Name, i), source.Ephemeral != nil)
			if err != nil {
				return reconcile.Result{}, err
			}
			if ok {
				ips = append(ips, commonv1alpha1.IP{Addr: prefix.Addr()})
			}
		}
	}
	if equality.Semantic.DeepEqual(ips, lb.Status.IPs) {
		return reconcile.Result{}, nil
	}
	return s.applyAfterLatency(lb, func() error {
		lb.Status.IPs = ips
		return s.client.Status().Update(ctx, lb)
	})
}

func ipOfFamily(ips []commonv1alpha1.IP, family corev1.IPFamily) *commonv1alpha1.IP {
	for i := range ips {
		if ips[i].Family() == family {
			return &ips[i]
		}
	}
	return nil
}

// hostPrefix turns a literal IP into a single-address prefix; nil stays nil.
func hostPrefix(ip *commonv1alpha1.IP) *netip.Prefix {
	if ip == nil {
		return nil
	}
	prefix := netip.PrefixFrom(ip.Addr, ip.BitLen())
	return &prefix
}
