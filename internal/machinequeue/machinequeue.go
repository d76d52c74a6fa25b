// Package machinequeue is the queue of the controllers that keep something of a Node and its
// IronCore Machine in sync, one Machine per key: the Nodes indexed by the Machine their provider
// ID names, the changes that queue a Machine, and the workers that sync each queued Machine.
package machinequeue

import (
	"context"
	"fmt"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// nodesByMachine indexes the Nodes by Machine name; the queues on one informer share it.
const nodesByMachine = "ironcore-machine"

// Spec is what a controller on a Queue does differently.
type Spec struct {
	// Name is the controller's name in --controllers, and its queue's.
	Name string
	// Failure is the message a failed sync is logged with.
	Failure string
	// Sync syncs the named Machine and the Node on it.
	Sync func(ctx context.Context, machine string, node *corev1.Node) error
	// NodeChanged tells whether a change of a Node concerns the controller; nil, every one does.
	NodeChanged func(old, node *corev1.Node) bool
	// NetworkInterfaces queues the Machine a changed NetworkInterface is attached to.
	NetworkInterfaces bool
	// MachinePools queues every Machine when a MachinePool changes, which is rare.
	MachinePools bool
}

// Queue is a rate-limited queue of Machine names, with the Nodes that run on them: the
// controller a Spec describes, embedded in the controller's own type.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	spec     Spec
	ironcore *ironcore.Client
	nodes    toolscache.Indexer
	synced   toolscache.InformerSynced
}

// New makes the queue of the controller spec describes, indexing the informer's Nodes by
// Machine unless a queue made before did. Call it before the informers start.
func New(client *ironcore.Client, nodeInformer coreinformers.NodeInformer, spec Spec) (*Queue, error) {
	informer := nodeInformer.Informer()
	q := &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: spec.Name}),
		spec:     spec,
		ironcore: client,
		nodes:    informer.GetIndexer(),
		synced:   informer.HasSynced,
	}
	if _, indexed := q.nodes.GetIndexers()[nodesByMachine]; !indexed {
		if err := informer.AddIndexers(toolscache.Indexers{nodesByMachine: q.index}); err != nil {
			return nil, fmt.Errorf("index Nodes by Machine: %w", err)
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: q.addNode,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			if spec.NodeChanged == nil || !ok1 || !ok2 || spec.NodeChanged(old, node) {
				q.addNode(newObj)
			}
		},
	}); err != nil {
		return nil, err
	}
	if err := client.OnMachineChange(func(machine *computev1alpha1.Machine) { q.Add(machine.Name) }); err != nil {
		return nil, err
	}
	if spec.NetworkInterfaces {
		if err := client.OnNetworkInterfaceChange(func(nic *networkingv1alpha1.NetworkInterface) {
			if nic.Spec.MachineRef != nil {
				q.Add(nic.Spec.MachineRef.Name)
			}
		}); err != nil {
			return nil, err
		}
	}
	if spec.MachinePools {
		if err := client.OnMachinePoolChange(func(*computev1alpha1.MachinePool) {
			for _, machine := range q.nodes.ListIndexFuncValues(nodesByMachine) {
				q.Add(machine)
			}
		}); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// Name implements the controller-manager's controller.Interface.
func (q *Queue) Name() string { return q.spec.Name }

// machineOf names the Machine a Node's provider ID names in this cluster's IronCore namespace
// (see ironcore.Client.MachineNamedBy); none for any other object.
func (q *Queue) machineOf(obj any) string {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return ""
	}
	machine, _ := q.ironcore.MachineNamedBy(node)
	return machine
}

func (q *Queue) index(obj any) ([]string, error) {
	if machine := q.machineOf(obj); machine != "" {
		return []string{machine}, nil
	}
	return nil, nil
}

// addNode queues the Machine of a Node, if it has one.
func (q *Queue) addNode(obj any) {
	if machine := q.machineOf(obj); machine != "" {
		q.Add(machine)
	}
}

// Run syncs each queued Machine with the given number of workers until ctx ends.
func (q *Queue) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer q.ShutDown()
	if !toolscache.WaitForNamedCacheSync(q.spec.Name, ctx.Done(), q.synced) || !q.ironcore.WaitForCacheSync(ctx) {
		return
	}
	work := func(ctx context.Context) {
		for {
			machine, shutdown := q.Get()
			if shutdown {
				return
			}
			if err := q.sync(ctx, machine); err != nil {
				klog.ErrorS(err, q.spec.Failure, "machine", klog.KRef(q.ironcore.Namespace(), machine))
				q.AddRateLimited(machine)
			} else {
				q.Forget(machine)
			}
			q.Done(machine)
		}
	}
	for range workers {
		go wait.UntilWithContext(ctx, work, time.Second)
	}
	<-ctx.Done()
}

// sync syncs the named Machine if the cache has a Node on it.
func (q *Queue) sync(ctx context.Context, machine string) error {
	nodes, err := q.nodes.ByIndex(nodesByMachine, machine)
	if err != nil || len(nodes) == 0 {
		return err
	}
	node, ok := nodes[0].(*corev1.Node)
	if !ok {
		return nil
	}
	return q.spec.Sync(ctx, machine, node)
}
