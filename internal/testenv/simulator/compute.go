package simulator

import (
	"context"
	"fmt"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1alpha1 "github.com/ironcore-dev/ironcore/api/core/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// poolCapacity is how many Machines of each class a simulated pool can take.
const poolCapacity = 10000

func (s *Simulator) setupMachinePools(mgr ctrl.Manager, options controller.Options) error {
	allPools := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		s.mu.Lock()
		defer s.mu.Unlock()
		requests := make([]reconcile.Request, 0, len(s.pools))
		for name := range s.pools {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
		}
		return requests
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("simulator-machinepool").
		WithOptions(options).
		WatchesRawSource(s.pokeSource()).
		For(&computev1alpha1.MachinePool{}).
		Watches(&computev1alpha1.MachineClass{}, allPools).
		Complete(reconcile.Func(s.reconcileMachinePool))
}

// reconcileMachinePool labels a hosted pool with its topology and reports capacity for every
// MachineClass, so that IronCore's scheduler places Machines on it. Conditions are left to
// IronCore's machinepoollifecycle controller.
func (s *Simulator) reconcileMachinePool(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	topology, hosted := s.pools[req.Name]
	s.mu.Unlock()
	if !hosted {
		return reconcile.Result{}, nil
	}
	pool := &computev1alpha1.MachinePool{}
	if err := s.client.Get(ctx, req.NamespacedName, pool); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.flagged(s.held, pool) {
		return reconcile.Result{}, nil
	}

	labels := map[string]string{}
	if topology.Zone != "" {
		labels[string(commonv1alpha1.TopologyLabelZone)] = topology.Zone
	}
	if topology.Region != "" {
		labels[string(commonv1alpha1.TopologyLabelRegion)] = topology.Region
	}
	if missingLabels(pool.Labels, labels) {
		base := pool.DeepCopy()
		if pool.Labels == nil {
			pool.Labels = map[string]string{}
		}
		for k, v := range labels {
			pool.Labels[k] = v
		}
		if err := s.client.Patch(ctx, pool, client.MergeFrom(base)); err != nil {
			return reconcile.Result{}, err
		}
	}

	classes := &computev1alpha1.MachineClassList{}
	if err := s.client.List(ctx, classes); err != nil {
		return reconcile.Result{}, err
	}
	status := pool.Status.DeepCopy()
	status.State = computev1alpha1.MachinePoolStateReady
	status.AvailableMachineClasses = nil
	status.Allocatable = corev1alpha1.ResourceList{}
	status.Capacity = corev1alpha1.ResourceList{}
	for _, class := range classes.Items {
		status.AvailableMachineClasses = append(status.AvailableMachineClasses, corev1.LocalObjectReference{Name: class.Name})
		count := corev1alpha1.ClassCountFor(corev1alpha1.ClassTypeMachineClass, class.Name)
		status.Allocatable[count] = *resource.NewQuantity(poolCapacity, resource.DecimalSI)
		status.Capacity[count] = *resource.NewQuantity(poolCapacity, resource.DecimalSI)
	}
	if equality.Semantic.DeepEqual(status, &pool.Status) {
		return reconcile.Result{}, nil
	}
	pool.Status = *status
	return reconcile.Result{}, s.client.Status().Update(ctx, pool)
}

func missingLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return true
		}
	}
	return false
}

func (s *Simulator) setupMachines(mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("simulator-machine").
		WithOptions(options).
		WatchesRawSource(s.pokeSource()).
		For(&computev1alpha1.Machine{}).
		Watches(&networkingv1alpha1.NetworkInterface{}, handler.EnqueueRequestsFromMapFunc(machineOfNetworkInterface)).
		Complete(reconcile.Func(s.reconcileMachine))
}

func machineOfNetworkInterface(_ context.Context, obj client.Object) []reconcile.Request {
	nic := obj.(*networkingv1alpha1.NetworkInterface)
	if nic.Spec.MachineRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: nic.Namespace, Name: nic.Spec.MachineRef.Name}}}
}

// reconcileMachine plays machinepoollet for a scheduled Machine: it claims referenced
// NetworkInterfaces, gives every interface a provider handle, and reports the Machine Running
// (or Shutdown when powered off) with its interfaces attached.
func (s *Simulator) reconcileMachine(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	machine := &computev1alpha1.Machine{}
	if err := s.client.Get(ctx, req.NamespacedName, machine); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.flagged(s.held, machine) || machine.DeletionTimestamp != nil || machine.Spec.MachinePoolRef == nil {
		return reconcile.Result{}, nil
	}
	s.mu.Lock()
	_, hosted := s.pools[machine.Spec.MachinePoolRef.Name]
	s.mu.Unlock()
	if !hosted {
		return reconcile.Result{}, nil
	}

	status := machine.Status.DeepCopy()
	status.MachineID = "sim://" + string(machine.UID)
	status.ObservedGeneration = machine.Generation
	status.State = computev1alpha1.MachineStateRunning
	if machine.Spec.Power == computev1alpha1.PowerOff {
		status.State = computev1alpha1.MachineStateShutdown
	}
	status.NetworkInterfaces = nil
	for _, machineNIC := range machine.Spec.NetworkInterfaces {
		name := computev1alpha1.MachineNetworkInterfaceName(machine.Name, machineNIC)
		attached, err := s.attachNetworkInterface(ctx, machine, name)
		if err != nil {
			return reconcile.Result{}, err
		}
		nicStatus := computev1alpha1.NetworkInterfaceStatus{
			Name:                machineNIC.Name,
			State:               computev1alpha1.NetworkInterfaceStatePending,
			NetworkInterfaceRef: corev1.LocalObjectReference{Name: name},
		}
		if attached {
			nicStatus.State = computev1alpha1.NetworkInterfaceStateAttached
			nicStatus.Handle = handle(machine.Namespace, name)
		}
		if previous := findMachineNIC(machine.Status.NetworkInterfaces, machineNIC.Name); previous != nil && previous.State == nicStatus.State {
			nicStatus.LastStateTransitionTime = previous.LastStateTransitionTime
		}
		status.NetworkInterfaces = append(status.NetworkInterfaces, nicStatus)
	}
	if equality.Semantic.DeepEqual(status, &machine.Status) {
		return reconcile.Result{}, nil
	}
	return s.applyAfterLatency(machine, func() error {
		machine.Status = *status
		return s.client.Status().Update(ctx, machine)
	})
}

// attachNetworkInterface claims the named interface for machine, as machinepoollet does for
// referenced interfaces, and sets its provider handle. It reports whether it is attached.
func (s *Simulator) attachNetworkInterface(ctx context.Context, machine *computev1alpha1.Machine, name string) (bool, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: machine.Namespace, Name: name}, nic); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if ref := nic.Spec.MachineRef; ref != nil && (ref.Name != machine.Name || ref.UID != machine.UID) {
		return false, nil
	}
	want := handle(machine.Namespace, name)
	if nic.Spec.MachineRef != nil && nic.Spec.ProviderID == want {
		return true, nil
	}
	base := nic.DeepCopy()
	nic.Spec.MachineRef = &commonv1alpha1.LocalUIDReference{Name: machine.Name, UID: machine.UID}
	nic.Spec.ProviderID = want
	if err := s.client.Patch(ctx, nic, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("attach NetworkInterface %s to Machine %s: %w", name, machine.Name, err)
	}
	return true, nil
}

func handle(namespace, nicName string) string {
	return "sim://" + namespace + "/" + nicName
}

func findMachineNIC(statuses []computev1alpha1.NetworkInterfaceStatus, name string) *computev1alpha1.NetworkInterfaceStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}
