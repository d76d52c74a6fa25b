package nodelabels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/machinequeue"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-node-labels"

// Controller keeps the Nodes' labels from IronCore in sync, one Machine's Node per queue key.
type Controller struct {
	ironcore *ironcore.Client
	client   kubernetes.Interface
	allow    AllowList
	queue    *machinequeue.Queue
}

// New wires the controller to the CCM's Node informer and the IronCore cache: a Node, its
// Machine or a MachinePool changing queues the Machines concerned. Call it before the
// informers start.
func New(client *ironcore.Client, kube kubernetes.Interface, allow AllowList, nodeInformer coreinformers.NodeInformer) (*Controller, error) {
	queue, err := machinequeue.New(Name, client, nodeInformer.Informer())
	if err != nil {
		return nil, err
	}
	c := &Controller{ironcore: client, client: kube, allow: allow, queue: queue}
	if _, err := nodeInformer.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: queue.AddNode,
		// Only a change of its labels or provider ID concerns a Node's labels, not its heartbeats.
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || old.Spec.ProviderID != node.Spec.ProviderID || !maps.Equal(old.Labels, node.Labels) {
				queue.AddNode(newObj)
			}
		},
	}); err != nil {
		return nil, err
	}
	if err := client.OnMachineChange(func(machine *computev1alpha1.Machine) { queue.Add(machine.Name) }); err != nil {
		return nil, err
	}
	// A pool's topology rarely changes: every Node is looked at again.
	if err := client.OnMachinePoolChange(func(*computev1alpha1.MachinePool) {
		for _, machine := range queue.Machines() {
			queue.Add(machine)
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Name implements the controller-manager's controller.Interface.
func (c *Controller) Name() string { return Name }

// Run processes the queue with the given number of workers until ctx ends, once both caches
// have synced.
func (c *Controller) Run(ctx context.Context, workers int) {
	c.queue.Run(ctx, workers, "Cannot sync a Node's labels from IronCore", c.sync)
}

// sync makes the labels of the named Machine's Node from IronCore those of the Machine and its
// pool now. A Machine or pool the cache does not have changes nothing: what is gone is no
// reason to take labels away from a Node that is about to go too.
func (c *Controller) sync(ctx context.Context, machineName string) error {
	node, err := c.queue.NodeOf(machineName)
	if err != nil || node == nil {
		return err
	}
	machine, err := c.ironcore.Machine(ctx, machineName)
	if errors.Is(err, ironcore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if machine.Spec.MachinePoolRef == nil || machine.Spec.MachinePoolRef.Name == "" {
		return nil
	}
	pool, err := c.ironcore.MachinePool(ctx, machine.Spec.MachinePoolRef.Name)
	if errors.Is(err, ironcore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	base, _ := PoolLabels(pool.Name) // a name that is no label value: the Node's event says so
	desired := FromIronCore(base, machine, pool, c.allow)
	changes := c.allow.Diff(node.Labels, desired)
	if changes.None() {
		return nil
	}
	if err := c.patch(ctx, node, changes); err != nil {
		return fmt.Errorf("label Node %s from IronCore: %w", node.Name, err)
	}
	klog.V(2).InfoS("Synced a Node's labels from IronCore", "node", klog.KObj(node), "machine", klog.KObj(machine), "set", changes.Set, "removed", changes.Remove)
	return nil
}

// patch applies the changes with a merge patch of the keys concerned only: labels others set
// at the same time are kept.
func (c *Controller) patch(ctx context.Context, node *corev1.Node, changes Changes) error {
	labels := map[string]any{}
	for key, value := range changes.Set {
		labels[key] = value
	}
	for _, key := range changes.Remove {
		labels[key] = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}
