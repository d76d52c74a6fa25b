// Package nodesync gives the upstream service controller a Node informer on which every Node
// event is an event of one and the same Node, so that its node queue holds a single key.
//
// The upstream service controller (k8s.io/cloud-provider/controllers/service) queues the name
// of every Node that is added, deleted, or changes its eligibility or provider ID, and for each
// key runs a full node sync: every Service's Node list is rebuilt from the Node lister and
// compared with its last one. A burst of N new Nodes thus costs N full syncs of S Services over
// N Nodes, O(S·N²): at 300 Nodes and 100 Services that was 80% of the CCM's allocations and
// 43% of its CPU during the burst (benchmark history in git). The sync reads only the lister and ignores
// the key, so one key loses nothing: a change during a sync marks the key dirty and brings one
// more sync, which sees every Node as the lister has it then.
package nodesync

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Key is the name every Node event carries for the handlers of the informer Coalesced returns.
const Key = "all-nodes"

// Coalesced returns nodes with handlers that see every Node under the name Key. Its lister and
// everything else are nodes' own.
func Coalesced(nodes coreinformers.NodeInformer) coreinformers.NodeInformer {
	return informer{NodeInformer: nodes}
}

type informer struct {
	coreinformers.NodeInformer
}

func (i informer) Informer() cache.SharedIndexInformer {
	return sharedInformer{SharedIndexInformer: i.NodeInformer.Informer()}
}

// sharedInformer renames the Nodes its handlers see; the store, indexers and lister still hold
// the real Nodes.
type sharedInformer struct {
	cache.SharedIndexInformer
}

func (s sharedInformer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.SharedIndexInformer.AddEventHandler(renaming{next: handler})
}

func (s sharedInformer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, period time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return s.SharedIndexInformer.AddEventHandlerWithResyncPeriod(renaming{next: handler}, period)
}

func (s sharedInformer) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return s.SharedIndexInformer.AddEventHandlerWithOptions(renaming{next: handler}, options)
}

// renaming passes each event on with the Node renamed to Key. The copy is shallow: handlers
// only read it.
type renaming struct {
	next cache.ResourceEventHandler
}

func (r renaming) OnAdd(obj any, isInInitialList bool) { r.next.OnAdd(rename(obj), isInInitialList) }
func (r renaming) OnUpdate(oldObj, newObj any)         { r.next.OnUpdate(rename(oldObj), rename(newObj)) }
func (r renaming) OnDelete(obj any)                    { r.next.OnDelete(rename(obj)) }

func rename(obj any) any {
	switch o := obj.(type) {
	case *corev1.Node:
		renamed := *o
		renamed.Name = Key
		return &renamed
	case cache.DeletedFinalStateUnknown:
		return cache.DeletedFinalStateUnknown{Key: Key, Obj: rename(o.Obj)}
	}
	return obj
}
