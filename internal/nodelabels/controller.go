package nodelabels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/machinequeue"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-node-labels"

// Controller keeps the Nodes' labels from IronCore in sync, one Machine's Node per queue key.
type Controller struct {
	*machinequeue.Queue
	ironcore *ironcore.Client
	client   kubernetes.Interface
	allow    AllowList
}

// New wires the controller to the CCM's Node informer and the IronCore cache: a Node, its
// Machine or a MachinePool changing queues the Machines concerned. Call it before the
// informers start.
func New(client *ironcore.Client, kube kubernetes.Interface, allow AllowList, nodeInformer coreinformers.NodeInformer) (*Controller, error) {
	c := &Controller{ironcore: client, client: kube, allow: allow}
	var err error
	if c.Queue, err = machinequeue.New(client, nodeInformer, machinequeue.Spec{
		Name: Name, Failure: "Cannot sync a Node's labels from IronCore", Sync: c.sync, MachinePools: true,
		// Only a change of its labels or provider ID concerns a Node's labels, not its heartbeats.
		NodeChanged: func(old, node *corev1.Node) bool {
			return old.Spec.ProviderID != node.Spec.ProviderID || !maps.Equal(old.Labels, node.Labels)
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// sync makes the labels of the named Machine's Node from IronCore those of the Machine and its
// pool now. A Machine or pool the cache does not have changes nothing: what is gone is no
// reason to take labels away from a Node that is about to go too.
func (c *Controller) sync(ctx context.Context, machineName string, node *corev1.Node) error {
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
