package nodelabels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-node-labels"

const nodesByMachineIndex = "ironcore-node-labels-machine"

// Controller keeps the Nodes' labels from IronCore in sync, one Machine's Node per queue key.
type Controller struct {
	ironcore *ironcore.Client
	client   kubernetes.Interface
	allow    AllowList
	nodes    toolscache.Indexer
	synced   toolscache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New wires the controller to the CCM's Node informer and the IronCore cache: a Node, its
// Machine or a MachinePool changing queues the Machines concerned. Call it before the
// informers start.
func New(client *ironcore.Client, kube kubernetes.Interface, allow AllowList, nodeInformer coreinformers.NodeInformer) (*Controller, error) {
	c := &Controller{
		ironcore: client,
		client:   kube,
		allow:    allow,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
	}
	informer := nodeInformer.Informer()
	if err := informer.AddIndexers(toolscache.Indexers{nodesByMachineIndex: c.machineOfNode}); err != nil {
		return nil, fmt.Errorf("index Nodes by Machine: %w", err)
	}
	c.nodes, c.synced = informer.GetIndexer(), informer.HasSynced
	enqueueNode := func(obj any) {
		if names, _ := c.machineOfNode(obj); len(names) == 1 {
			c.queue.Add(names[0])
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: enqueueNode,
		// Only a change of its labels or provider ID concerns a Node's labels, not its heartbeats.
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 || old.Spec.ProviderID != node.Spec.ProviderID || !maps.Equal(old.Labels, node.Labels) {
				enqueueNode(newObj)
			}
		},
	}); err != nil {
		return nil, err
	}
	if err := client.OnMachineChange(func(machine *computev1alpha1.Machine) { c.queue.Add(machine.Name) }); err != nil {
		return nil, err
	}
	// A pool's topology rarely changes: every Node is looked at again.
	if err := client.OnMachinePoolChange(func(*computev1alpha1.MachinePool) {
		for _, machine := range c.nodes.ListIndexFuncValues(nodesByMachineIndex) {
			c.queue.Add(machine)
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// machineOfNode indexes an initialized Node by the name of its Machine in this cluster's
// IronCore namespace.
func (c *Controller) machineOfNode(obj any) ([]string, error) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Spec.ProviderID == "" {
		return nil, nil
	}
	id, parseErr := providerid.Parse(node.Spec.ProviderID)
	if parseErr != nil || id.Namespace != c.ironcore.Namespace() {
		return nil, nil //nolint:nilerr // a Node of another provider or namespace: not indexed
	}
	return []string{id.Machine}, nil
}

// Name implements the controller-manager's controller.Interface.
func (c *Controller) Name() string { return Name }

// Run processes the queue with the given number of workers until ctx ends, once both caches
// have synced.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced) || !c.ironcore.WaitForCacheSync(ctx) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) work(ctx context.Context) {
	for {
		machine, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		if err := c.sync(ctx, machine); err != nil {
			klog.ErrorS(err, "Cannot sync a Node's labels from IronCore", "machine", klog.KRef(c.ironcore.Namespace(), machine))
			c.queue.AddRateLimited(machine)
		} else {
			c.queue.Forget(machine)
		}
		c.queue.Done(machine)
	}
}

// sync makes the labels of the named Machine's Node from IronCore those of the Machine and its
// pool now. A Machine or pool the cache does not have changes nothing: what is gone is no
// reason to take labels away from a Node that is about to go too.
func (c *Controller) sync(ctx context.Context, machineName string) error {
	nodes, err := c.nodes.ByIndex(nodesByMachineIndex, machineName)
	if err != nil || len(nodes) == 0 {
		return err
	}
	node := nodes[0].(*corev1.Node)
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
