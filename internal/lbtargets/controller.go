// Package lbtargets keeps load balancer targets on the Nodes that can serve. IronCore
// LoadBalancers have no health checks, and the upstream service controller syncs a Service's
// load balancer only when the Service changes or a Node's exclusion label or provider ID does:
// a Node that goes NotReady, is shut down or tainted for deletion stays a target of every
// Service, a Local Service's targets would not follow its endpoints, and a target changed on
// IronCore by hand would stay wrong. Targets (targets.go) decides the targets and owns the
// target labels (labels.go); this controller watches Node health, the Nodes' Machines, the
// EndpointSlices of Local Services and NetworkInterface addresses, resyncs everything
// periodically, and runs the provider's UpdateLoadBalancer for the Services concerned, which
// queues their targets on Targets; Targets applies the target rules (package targetrules) and
// writes only what changes.
package lbtargets

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-load-balancer-targets"

// Reasons of the events on Nodes whose health changes their load balancer traffic.
const (
	ReasonTargetExcluded = "LoadBalancerTargetExcluded"
	ReasonTargetRestored = "LoadBalancerTargetRestored"
)

// ReasonDriftRepaired is the reason of the Normal event on a Service whose routing, or on a
// Node whose target label, was changed outside the CCM and put back.
const ReasonDriftRepaired = "LoadBalancerTargetsDriftRepaired"

// DefaultCoalesce is how long the endpoint changes of a Local Service gather before its
// targets are synced: a rollout changes its EndpointSlices many times a second, and one sync
// after the burst writes the routing once.
const DefaultCoalesce = 250 * time.Millisecond

// recheckDelays are when, after a LoadBalancer stopped selecting its targets, its routing is
// read from IronCore and synced again: IronCore may rewrite it once more from the selector it
// saw before, sooner or, while it is busy, later.
var recheckDelays = [...]time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second}

// Config wires the controller.
type Config struct {
	IronCore *ironcore.Client
	// LoadBalancers is the provider's implementation, called as the service controller calls it.
	LoadBalancers cloudprovider.LoadBalancer
	// ClusterName is the --cluster-name the service controller passes to LoadBalancers.
	ClusterName string
	// Class says which Services are this CCM's.
	Class          lbclass.Policy
	Services       coreinformers.ServiceInformer
	Nodes          coreinformers.NodeInformer
	EndpointSlices discoveryinformers.EndpointSliceInformer
	// Coalesce is how long a Local Service's endpoint changes gather; zero means DefaultCoalesce.
	Coalesce time.Duration
	// Targets is the provider's; the controller queues its label syncs.
	Targets *Targets
	// ExplicitRouting is true when the CCM writes every LoadBalancerRouting
	// (--use-nic-selector=false); otherwise it writes only those of Local Services.
	ExplicitRouting bool
	// Resync is how often every Service's targets and the target labels are synced without a
	// change seen; zero turns it off.
	Resync   time.Duration
	Recorder record.EventRecorder
}

// Controller is the load balancer targets controller.
type Controller struct {
	Config
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	synced   []toolscache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[key]
	// mu guards known and machineNodes.
	mu sync.Mutex
	// known is what the last sync of each Node found.
	known map[string]nodeState
	// machineNodes maps a Machine's name to its Node's, for Machine changes.
	machineNodes map[string]string
}

// key is a queue item: a Node whose health to evaluate, or a Service whose targets to sync
// (or to verify against IronCore: the attempt tells the rechecks of one Service apart).
type key struct {
	kind      string
	namespace string
	name      string
	attempt   int
}

const (
	kindNode = "node"
	// kindGraceEnd is a Node whose NotReady grace period ends.
	kindGraceEnd = "grace-end"
	kindService  = "service"
	kindVerify   = "verify"
	// kindAll is every Service's targets and the target labels; kindRouted is every routing
	// the CCM writes. Both are queued after the coalescing delay, so that a burst of joining
	// Nodes or NetworkInterfaces syncs each Service a few times, not once per Node.
	kindAll    = "all"
	kindRouted = "routed"
)

// nodeState is what a Node's sync found: the health verdict's kind and whether the service
// controller passes the Node to load balancers.
type nodeState struct {
	unhealthy string
	eligible  bool
}

// New registers the controller's event handlers. Call it before the informers start.
func New(config Config) (*Controller, error) {
	if config.Coalesce <= 0 {
		config.Coalesce = DefaultCoalesce
	}
	c := &Controller{
		Config:   config,
		services: config.Services.Lister(),
		nodes:    config.Nodes.Lister(),
		synced: []toolscache.InformerSynced{config.Services.Informer().HasSynced, config.Nodes.Informer().HasSynced,
			config.EndpointSlices.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
			workqueue.TypedRateLimitingQueueConfig[key]{Name: Name}),
		known:        map[string]nodeState{},
		machineNodes: map[string]string{},
	}
	if _, err := config.Nodes.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if node, ok := obj.(*corev1.Node); ok {
				c.queue.Add(key{kind: kindNode, name: node.Name})
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && healthInputsChanged(old, node) {
				c.queue.Add(key{kind: kindNode, name: node.Name})
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				c.queue.Add(key{kind: kindNode, name: node.Name})
			}
		},
	}); err != nil {
		return nil, err
	}
	// A Service turning Local or back changes who routes it, and its targets; the service
	// controller's call may come with a Service newer than this cache, so the routing is
	// synced again when the cache shows the change.
	if _, err := config.Services.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Service)
			service, ok2 := newObj.(*corev1.Service)
			if ok1 && ok2 && c.Targets != nil && targetrules.Local(old) != targetrules.Local(service) {
				c.Targets.QueueRouting(service.Namespace, service.Name)
			}
		},
	}); err != nil {
		return nil, err
	}
	endpointsChanged := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if slice, ok := obj.(*discoveryv1.EndpointSlice); ok {
			c.endpointSliceChanged(slice)
		}
	}
	if _, err := config.EndpointSlices.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    endpointsChanged,
		UpdateFunc: func(_, newObj any) { endpointsChanged(newObj) },
		DeleteFunc: endpointsChanged,
	}); err != nil {
		return nil, err
	}
	// A Machine's state, deletion or disappearance changes whether its Node can serve.
	if err := config.IronCore.OnMachineChange(func(machine *computev1alpha1.Machine) { c.machineChanged(machine.Name) }); err != nil {
		return nil, err
	}
	// A NetworkInterface that becomes Available with an address, or stops being one, or is
	// deleted, joins or leaves the routings the CCM writes, which hold only those, as IronCore's
	// selector-based routing does; its Node's verdict may change too. The queue folds the
	// bursts of a joining Node.
	if err := config.IronCore.OnNetworkInterfaceAddressesChange(func(nic *networkingv1alpha1.NetworkInterface) {
		if nic.Spec.MachineRef != nil {
			c.machineChanged(nic.Spec.MachineRef.Name)
			c.queue.AddAfter(key{kind: kindRouted}, c.Coalesce)
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// routedByCCM tells whether the CCM writes the LoadBalancerRouting of the Service's
// LoadBalancer: with explicit routing, and for Local Services, whose targets are their own.
func (c *Controller) routedByCCM(service *corev1.Service) bool {
	return c.ExplicitRouting || targetrules.Local(service)
}

// queueRoutedServices queues every Service whose routing the CCM writes.
func (c *Controller) queueRoutedServices() {
	if err := c.queueServices(c.routedByCCM); err != nil {
		klog.ErrorS(err, "Cannot list the Services whose targets to sync")
	}
}

// resync queues every Service and the target labels, for what no event brought.
func (c *Controller) resync(context.Context) {
	if err := c.queueServices(func(*corev1.Service) bool { return true }); err != nil {
		klog.ErrorS(err, "Cannot list the Services whose targets to resync")
	}
	if c.Targets != nil {
		c.Targets.QueueLabels()
	}
}

// Name implements the controller-manager's controller.Interface.
func (c *Controller) Name() string { return Name }

// RecheckSoon has the Service's routing read from IronCore and synced again, a few times over
// the next half minute.
func (c *Controller) RecheckSoon(service *corev1.Service) {
	for attempt, delay := range recheckDelays {
		c.queue.AddAfter(key{kind: kindVerify, namespace: service.Namespace, name: service.Name, attempt: attempt}, delay)
	}
}

// healthInputsChanged reports whether anything the target rules read from a Node changed.
func healthInputsChanged(old, node *corev1.Node) bool {
	if !old.DeletionTimestamp.Equal(node.DeletionTimestamp) || old.Spec.ProviderID != node.Spec.ProviderID ||
		old.Labels[corev1.LabelNodeExcludeBalancers] != node.Labels[corev1.LabelNodeExcludeBalancers] ||
		len(old.Spec.Taints) != len(node.Spec.Taints) {
		return true
	}
	for i := range node.Spec.Taints {
		if old.Spec.Taints[i].Key != node.Spec.Taints[i].Key {
			return true
		}
	}
	oldReady, ready := readyCondition(old), readyCondition(node)
	return oldReady.Status != ready.Status || !oldReady.LastTransitionTime.Equal(&ready.LastTransitionTime)
}

func readyCondition(node *corev1.Node) corev1.NodeCondition {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition
		}
	}
	return corev1.NodeCondition{}
}

// endpointSliceChanged queues the Local Service of type LoadBalancer the EndpointSlice belongs
// to, after the coalescing delay; the queue holds a key once however many changes come.
func (c *Controller) endpointSliceChanged(slice *discoveryv1.EndpointSlice) {
	name := slice.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	service, err := c.services.Services(slice.Namespace).Get(name)
	if err != nil || !c.Class.Wants(service) || !targetrules.Local(service) {
		return
	}
	c.queue.AddAfter(key{kind: kindService, namespace: service.Namespace, name: service.Name}, c.Coalesce)
}

// machineChanged queues the Node of the named Machine, whose state, existence and
// NetworkInterfaces the target rules read.
func (c *Controller) machineChanged(machine string) {
	c.mu.Lock()
	node, ok := c.machineNodes[machine]
	c.mu.Unlock()
	if ok {
		c.queue.Add(key{kind: kindNode, name: node})
	}
}

// Run processes the queue with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced...) || !c.IronCore.WaitForCacheSync(ctx) {
		return
	}
	// EndpointSlice changes that came before the Services were known were dropped.
	if err := c.queueServices(targetrules.Local); err != nil {
		klog.ErrorS(err, "Cannot list the Services whose targets to sync")
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	if c.Resync > 0 {
		go wait.NonSlidingUntilWithContext(ctx, c.resync, c.Resync)
	}
	<-ctx.Done()
}

func (c *Controller) work(ctx context.Context) {
	for {
		item, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		var err error
		switch item.kind {
		case kindNode:
			err = c.syncNode(ctx, item.name)
		case kindGraceEnd:
			if err = c.syncNode(ctx, item.name); err == nil {
				c.queueAllTargets()
			}
		case kindAll:
			c.queueAllTargets()
		case kindRouted:
			c.queueRoutedServices()
		case kindService:
			err = c.syncService(ctx, item.namespace, item.name)
		case kindVerify:
			err = c.verifyService(ctx, item.namespace, item.name)
		}
		if onlySkipped(err) {
			// The Nodes' own changes bring them in; the other Nodes were applied.
			klog.V(2).InfoS("Some Nodes are not load balancer targets yet", item.kind, klog.KRef(item.namespace, item.name), "reason", err)
			err = nil
		}
		if err != nil {
			klog.ErrorS(err, "Cannot sync load balancer targets", item.kind, klog.KRef(item.namespace, item.name))
			c.queue.AddRateLimited(item)
		} else {
			c.queue.Forget(item)
		}
		c.queue.Done(item)
	}
}

// syncNode applies the target rules to a Node. When the Node's verdict, or whether the service
// controller passes it, changes, it records that on the Node and queues every Service of type
// LoadBalancer and the target labels; while its Ready condition is within the grace period, it
// comes back when the period ends. A deleted Node leaves every target too.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		if c.forgetNode(name) {
			c.queueAllTargetsSoon()
		}
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	previous, seen := c.known[name]
	c.mu.Unlock()
	// Whether the Node is a target now, for the grace period: as this controller last found
	// it; after a restart, the targets' own syncs judge from IronCore.
	verdict, graceLeft, ok, err := c.Targets.NodeVerdict(ctx, node, seen && previous.unhealthy == "")
	if err != nil {
		return err
	}
	if !ok {
		// Not an IronCore Machine of this namespace: never a target.
		c.forgetNode(name)
		return nil
	}
	state := nodeState{unhealthy: verdict.Kind, eligible: targetrules.Eligible(node)}
	c.mu.Lock()
	c.known[name] = state
	if id, err := providerid.Parse(node.Spec.ProviderID); err == nil {
		c.machineNodes[id.Machine] = name
	}
	c.countUnhealthy()
	c.mu.Unlock()

	if graceLeft > 0 {
		// A moment past the end, so that the verdict has turned; every target is synced then,
		// since after a restart this controller cannot tell whether the Node was one.
		c.queue.AddAfter(key{kind: kindGraceEnd, name: name}, graceLeft+100*time.Millisecond)
	}
	if seen && previous == state {
		return nil
	}
	c.recordVerdict(node, verdict, previous, seen)
	if !seen && verdict.Kind == "" {
		// A Node seen for the first time, able to serve: the service controller syncs the load
		// balancers for a new Node itself.
		return nil
	}
	c.queueAllTargetsSoon()
	return nil
}

// recordVerdict records on the Node that its traffic changes. A Node that has not served yet
// (not initialized, never Ready) is not told it stops: it joins quietly once it can serve.
func (c *Controller) recordVerdict(node *corev1.Node, verdict targetrules.Verdict, previous nodeState, seen bool) {
	joining := func(kind string) bool {
		return kind == targetrules.KindNotInitialized || kind == targetrules.KindNeverReady
	}
	switch {
	case verdict.Kind != "" && (!seen || previous.unhealthy != verdict.Kind) && !joining(verdict.Kind):
		metrics.NodeHealthExclusions.WithLabelValues(verdict.Kind).Inc()
		c.Recorder.Eventf(node, corev1.EventTypeWarning, ReasonTargetExcluded,
			"The Node no longer receives load balancer traffic, unless no Node that could serve a Service is healthy: %s", verdict.Reason)
		klog.InfoS("Node cannot serve; it is no longer a load balancer target", "node", klog.KObj(node), "reason", verdict.Reason)
	case verdict.Kind == "" && seen && joining(previous.unhealthy):
		klog.V(2).InfoS("Node can serve; it becomes a load balancer target", "node", klog.KObj(node))
	case verdict.Kind == "" && seen && previous.unhealthy != "":
		c.Recorder.Event(node, corev1.EventTypeNormal, ReasonTargetRestored, "The Node is healthy again and receives load balancer traffic")
		klog.InfoS("Node is healthy again; it is a load balancer target", "node", klog.KObj(node))
	}
}

// queueAllTargets queues the target labels and every Service of type LoadBalancer.
func (c *Controller) queueAllTargets() {
	c.Targets.QueueLabels()
	if err := c.queueServices(func(*corev1.Service) bool { return true }); err != nil {
		klog.ErrorS(err, "Cannot list the Services whose targets to sync")
	}
}

// queueAllTargetsSoon queues every Service's targets and the target labels after the
// coalescing delay: the queue holds the key once, however many Nodes change meanwhile.
func (c *Controller) queueAllTargetsSoon() {
	c.queue.AddAfter(key{kind: kindAll}, c.Coalesce)
}

// forgetNode forgets a Node, and reports whether it was known.
func (c *Controller) forgetNode(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, known := c.known[name]
	delete(c.known, name)
	for machine, node := range c.machineNodes {
		if node == name {
			delete(c.machineNodes, machine)
		}
	}
	c.countUnhealthy()
	return known
}

// countUnhealthy sets the gauge of unhealthy Nodes; c.mu must be held.
func (c *Controller) countUnhealthy() {
	unhealthy := 0
	for _, known := range c.known {
		if known.unhealthy != "" {
			unhealthy++
		}
	}
	metrics.UnhealthyNodes.Set(float64(unhealthy))
}

// queueServices queues the Services of type LoadBalancer that match.
func (c *Controller) queueServices(match func(*corev1.Service) bool) error {
	services, err := c.services.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, service := range services {
		if c.Class.Wants(service) && match(service) {
			c.queue.Add(key{kind: kindService, namespace: service.Namespace, name: service.Name})
		}
	}
	return nil
}

// verifyService syncs the Service's routing against the one IronCore has, read from the API
// server, not against what this process last wrote.
func (c *Controller) verifyService(ctx context.Context, namespace, name string) error {
	c.Targets.VerifyRouting(namespace, name)
	return c.syncService(ctx, namespace, name)
}

// onlySkipped reports whether err only names Nodes that could not be made targets.
func onlySkipped(err error) bool {
	if err == nil {
		return false
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			if e != nil && !errors.Is(e, targetrules.ErrNodesSkipped) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, targetrules.ErrNodesSkipped)
}

// syncService syncs one Service's targets through the provider, which writes only what
// changes.
func (c *Controller) syncService(ctx context.Context, namespace, name string) error {
	service, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.Class.Wants(service) {
		return nil
	}
	nodes, err := EligibleNodes(c.nodes)
	if err != nil {
		return err
	}
	return c.LoadBalancers.UpdateLoadBalancer(ctx, c.ClusterName, service, nodes)
}

// EligibleNodes lists the Nodes the service controller passes to load balancers.
func EligibleNodes(lister corelisters.NodeLister) ([]*corev1.Node, error) {
	all, err := lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	nodes := make([]*corev1.Node, 0, len(all))
	for _, node := range all {
		if targetrules.Eligible(node) {
			nodes = append(nodes, node)
		}
	}
	return nodes, nil
}
