// Package machinequeue is the queue of the controllers that keep something of a Node and its
// IronCore Machine in sync, one Machine per key: the Nodes indexed by the Machine their provider
// ID names, and the workers that sync each queued Machine.
package machinequeue

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// nodesByMachine indexes the Nodes by Machine name; the queues on one informer share it.
const nodesByMachine = "ironcore-machine"

// Queue is a rate-limited queue of Machine names, with the Nodes that run on them.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	name     string
	ironcore *ironcore.Client
	nodes    toolscache.Indexer
	synced   toolscache.InformerSynced
}

// New makes the queue of the named controller, and indexes the informer's Nodes by Machine
// unless a queue made before did. Call it before the informer starts.
func New(name string, client *ironcore.Client, informer toolscache.SharedIndexInformer) (*Queue, error) {
	q := &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name}),
		name:     name,
		ironcore: client,
		nodes:    informer.GetIndexer(),
		synced:   informer.HasSynced,
	}
	if _, indexed := q.nodes.GetIndexers()[nodesByMachine]; !indexed {
		if err := informer.AddIndexers(toolscache.Indexers{nodesByMachine: q.index}); err != nil {
			return nil, fmt.Errorf("index Nodes by Machine: %w", err)
		}
	}
	return q, nil
}

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

// AddNode queues the Machine of a Node, if it has one.
func (q *Queue) AddNode(obj any) {
	if machine := q.machineOf(obj); machine != "" {
		q.Add(machine)
	}
}

// NodeOf returns the Node that runs on the named Machine, or nil if the cache has none.
func (q *Queue) NodeOf(machine string) (*corev1.Node, error) {
	nodes, err := q.nodes.ByIndex(nodesByMachine, machine)
	if err != nil || len(nodes) == 0 {
		return nil, err
	}
	node, _ := nodes[0].(*corev1.Node)
	return node, nil
}

// Machines lists the Machines the cached Nodes run on.
func (q *Queue) Machines() []string { return q.nodes.ListIndexFuncValues(nodesByMachine) }

// Run syncs each queued Machine with workers until ctx ends, once the Node cache and the
// IronCore cache have synced. A failed sync is logged with failure and queued again with the
// queue's backoff.
func (q *Queue) Run(ctx context.Context, workers int, failure string, sync func(context.Context, string) error) {
	defer utilruntime.HandleCrash()
	defer q.ShutDown()
	if !toolscache.WaitForNamedCacheSync(q.name, ctx.Done(), q.synced) || !q.ironcore.WaitForCacheSync(ctx) {
		return
	}
	work := func(ctx context.Context) {
		for {
			machine, shutdown := q.Get()
			if shutdown {
				return
			}
			if err := sync(ctx, machine); err != nil {
				klog.ErrorS(err, failure, "machine", klog.KRef(q.ironcore.Namespace(), machine))
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
