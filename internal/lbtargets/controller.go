// Package lbtargets is the load balancer targets controller, the one owner of what carries
// traffic to the Nodes: the target label that selecting LoadBalancers select by (labels.go) and
// the LoadBalancerRoutings the CCM writes (routing.go). IronCore LoadBalancers have no health
// checks, so a Node is a target only while package targetrules finds it can serve.
//
// It is shaped like Kubernetes' EndpointSlice controller: event handlers and the provider's
// load balancers only queue keys, and a sync compares the desired targets with the newest this
// process knows of, from IronCore or its own last write.
package lbtargets

import (
	"context"
	"errors"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-load-balancer-targets"

// Reasons of the events on Nodes whose health changes their load balancer traffic.
const (
	ReasonTargetExcluded = "LoadBalancerTargetExcluded"
	ReasonTargetRestored = "LoadBalancerTargetRestored"
)

// ReasonDriftRepaired is the reason of the Normal event when a routing or target label changed
// outside the CCM is put back.
const ReasonDriftRepaired = "LoadBalancerTargetsDriftRepaired"

// DefaultCoalesce is how long changes that concern many Services gather, so that a rollout or a
// burst of joining Nodes writes each routing once.
const DefaultCoalesce = 250 * time.Millisecond

// recheckDelays are when a routing is synced again after its LoadBalancer stopped selecting:
// IronCore may rewrite it once more from the old selector, later while it is busy.
func recheckDelays() []time.Duration {
	return []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second}
}

// Config builds the controller.
type Config struct {
	IronCore *ironcore.Client
	Cluster  string
	Network  string
	// Selecting is --use-nic-selector: LoadBalancers select their targets by the target label.
	Selecting bool
	// RoutedNetwork is the Network on which the route controller routes the Nodes' pod CIDRs, or
	// empty: there, a new Node's target label goes with the write of its route.
	RoutedNetwork string
	// LabelRouteWait overrides DefaultLabelRouteWait when positive.
	LabelRouteWait time.Duration
	Health         targetrules.Health
	// Class says which Services are this CCM's.
	Class lbclass.Policy
	// Owners tells which LoadBalancers are the cluster's.
	Owners   ironcore.Owners
	Recorder record.EventRecorder
	// Coalesce overrides DefaultCoalesce when positive.
	Coalesce time.Duration
	// Resync is how often all targets are synced without a change seen; zero turns it off.
	Resync time.Duration
	// FirstTargetsFor overrides DefaultFirstTargetsFor when positive (see firstTargets).
	FirstTargetsFor time.Duration
	// Explain has every target write say why, and which Nodes it leaves out (--dry-run).
	Explain bool
	// New registers handlers on these informers, so it comes before they start.
	Nodes          coreinformers.NodeInformer
	Services       coreinformers.ServiceInformer
	EndpointSlices discoveryinformers.EndpointSliceInformer
}

// ConfigFrom is the Config of the CCM's flags and cloud-config; the caller adds the rest.
func ConfigFrom(options config.Options, cloudConfig config.CloudConfig) Config {
	return Config{
		Cluster:   cloudConfig.ClusterName,
		Network:   cloudConfig.NetworkName,
		Selecting: options.UseNICSelector,
		Health:    targetrules.Health{Enabled: options.NodeHealth, ReadyGrace: options.UnreadyGracePeriod},
		Class:     lbclass.Policy{ClassOnly: !options.DefaultLoadBalancer},
		Resync:    options.TargetResync,
		Explain:   options.DryRun,
	}
}

// New builds the controller on the informers and registers its handlers; Run runs it.
func New(config Config) (*Controller, error) {
	if config.Nodes == nil || config.Services == nil || config.EndpointSlices == nil {
		return nil, errors.New("the load balancer targets controller needs the Node, Service and EndpointSlice informers")
	}
	t := newController(config, listers{
		nodes: config.Nodes.Lister(), services: config.Services.Lister(), endpointSlices: config.EndpointSlices.Lister(),
		endpointSlicesSynced: config.EndpointSlices.Informer().HasSynced,
		synced:               []toolscache.InformerSynced{config.Nodes.Informer().HasSynced, config.Services.Informer().HasSynced},
	})
	if err := t.watch(config.Nodes, config.Services, config.EndpointSlices); err != nil {
		return nil, err
	}
	if t.selecting {
		t.ironcore.RideAlong(t.labelIfServing)
	}
	return t, nil
}

// newController builds the controller on the listers, without handlers.
func newController(config Config, l listers) *Controller {
	if config.Coalesce <= 0 {
		config.Coalesce = DefaultCoalesce
	}
	if config.LabelRouteWait <= 0 {
		config.LabelRouteWait = DefaultLabelRouteWait
	}
	if config.FirstTargetsFor <= 0 {
		config.FirstTargetsFor = DefaultFirstTargetsFor
	}
	t := &Controller{
		ironcore:     config.IronCore,
		cluster:      config.Cluster,
		network:      config.Network,
		selecting:    config.Selecting,
		routeWait:    ironcore.RouteWait{Network: config.RoutedNetwork, Cluster: config.Cluster, For: config.LabelRouteWait},
		health:       config.Health,
		class:        config.Class,
		owners:       config.Owners,
		recorder:     config.Recorder,
		coalesce:     config.Coalesce,
		firstFor:     config.FirstTargetsFor,
		resync:       config.Resync,
		explain:      config.Explain,
		listers:      l,
		labels:       labelRecord{process: string(uuid.NewUUID())},
		nodeVerdicts: nodeVerdicts{known: map[string]nodeState{}, machineNodes: map[string]string{}},
	}
	t.queue = t.newQueue(clock.RealClock{})
	return t
}

// newQueue is the controller's workqueue, in firstQueue's order, on the clock.
func (t *Controller) newQueue(clock clock.WithTicker) workqueue.TypedRateLimitingInterface[key] {
	order := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[key]{Name: Name, Queue: newFirstQueue(t.waitsForFirstTraffic), Clock: clock})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: Name, Clock: clock, DelayingQueue: workqueue.NewTypedDelayingQueueWithConfig(
			workqueue.TypedDelayingQueueConfig[key]{Name: Name, Queue: order, Clock: clock})})
}

// waitsForFirstTraffic tells whether the key is the routing of a Service with no address and no
// destination yet; it goes first, as such a Service has no traffic at all while a routing
// being rewritten carries some. The workqueue calls it under its own lock.
func (t *Controller) waitsForFirstTraffic(k key) bool {
	if k.kind != routingKind {
		return false
	}
	_, unaddressed := t.routing.unaddressed.Load(k.name)
	_, reaching := t.routing.reaching.Load(k.name)
	return unaddressed && !reaching
}

// watch registers the controller's handlers on the informers and the IronCore cache.
func (t *Controller) watch(nodes coreinformers.NodeInformer, services coreinformers.ServiceInformer, endpointSlices discoveryinformers.EndpointSliceInformer) error {
	queueNode := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if node, ok := obj.(*corev1.Node); ok {
			t.queue.Add(key{kind: nodeKind, name: node.Name})
		}
	}
	if _, err := nodes.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: queueNode,
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 && targetrules.NodeChanged(old, node) {
				queueNode(node)
			}
		},
		DeleteFunc: queueNode,
	}); err != nil {
		return err
	}
	if _, err := services.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if service, ok := obj.(*corev1.Service); ok {
				t.recordAddress(service)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Service)
			service, ok2 := newObj.(*corev1.Service)
			if ok1 && ok2 {
				t.serviceChanged(old, service)
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if service, ok := obj.(*corev1.Service); ok {
				t.serviceDeleted(service)
			}
		},
	}); err != nil {
		return err
	}
	endpointsChanged := func(obj any, delay time.Duration) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if slice, ok := obj.(*discoveryv1.EndpointSlice); ok {
			t.endpointSliceChanged(slice, delay)
		}
	}
	if _, err := endpointSlices.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { endpointsChanged(obj, t.coalesce) },
		UpdateFunc: func(oldObj, newObj any) {
			// Endpoints that leave a Node may take it out of a Local Service's routing: at
			// once. Endpoints that arrive wait for the others of a rollout.
			delay := t.coalesce
			old, ok1 := oldObj.(*discoveryv1.EndpointSlice)
			slice, ok2 := newObj.(*discoveryv1.EndpointSlice)
			if !ok1 || !ok2 || targetrules.NodesLeft(old, slice) {
				delay = 0
			}
			endpointsChanged(newObj, delay)
		},
		DeleteFunc: func(obj any) { endpointsChanged(obj, 0) },
	}); err != nil {
		return err
	}
	// A Machine's state, deletion or disappearance changes whether its Node can serve.
	if err := t.ironcore.OnMachineChange(func(machine *computev1alpha1.Machine) { t.machineChanged(machine.Name) }); err != nil {
		return err
	}
	// A NetworkInterface that starts or stops serving joins or leaves the routings the CCM
	// writes, and may change its Node's verdict.
	if err := t.ironcore.OnNetworkInterfaceChangeOf(targetrules.NetworkInterfaceChanged, func(nic *networkingv1alpha1.NetworkInterface) {
		if nic.Spec.MachineRef != nil {
			t.machineChanged(nic.Spec.MachineRef.Name)
		}
		// One that stops serving leaves the routings at once; one that starts waits for the
		// others of its wave.
		delay := time.Duration(0)
		if targetrules.ServesTraffic(nic) {
			delay = t.coalesce
		}
		t.queueServices(t.routedByCCM, delay)
	}); err != nil {
		return err
	}
	t.watchNetworkInterfaces()
	return nil
}

// workers is how many syncs run at once. More do not make IronCore answer sooner: with 30, at
// 300 Nodes and 100 Services on the test stack, a routing write took 2.2 s (p50) instead of
// 0.6 s, and addresses came later.
const workers = 10

// Run syncs the targets until ctx ends.
func (t *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer t.queue.ShutDown()
	if err := t.ironcore.OnLoadBalancerSpecChange(t.loadBalancerChanged); err != nil {
		klog.ErrorS(err, "Cannot watch LoadBalancers for their routings; they are synced on requests and resyncs only")
	}
	// A LoadBalancer's address brings its routing from its first few Nodes to every one.
	if err := t.ironcore.OnLoadBalancerAddedOrAddressed(t.queueOwnerOf); err != nil {
		klog.ErrorS(err, "Cannot watch LoadBalancers' addresses; routings are completed on Node changes and resyncs only")
	}
	if err := t.ironcore.OnLoadBalancerRoutingChange(t.queueRoutingOwner); err != nil {
		klog.ErrorS(err, "Cannot watch LoadBalancerRoutings; drift is repaired on resyncs only")
	}
	if err := t.ironcore.OnLoadBalancerDelete(t.loadBalancerDeleted); err != nil {
		klog.ErrorS(err, "Cannot watch LoadBalancers for their deletion; what was recorded of those deleted by others is kept")
	}
	if !t.ironcore.WaitForCacheSync(ctx) {
		return
	}
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), t.listers.synced...) {
		return
	}
	// EndpointSlice changes that came before the Services were known were dropped.
	t.queueServices(targetrules.Local, 0)
	for range workers {
		go wait.UntilWithContext(ctx, t.work, time.Second)
	}
	if t.resync > 0 {
		go wait.NonSlidingUntilWithContext(ctx, func(context.Context) { t.queueAllTargets(0) }, t.resync)
	}
	<-ctx.Done()
}

// Name implements the controller-manager's controller.Interface.
func (t *Controller) Name() string { return Name }

func (t *Controller) work(ctx context.Context) {
	for {
		key, shutdown := t.queue.Get()
		if shutdown {
			return
		}
		err := t.sync(ctx, key)
		switch {
		case errors.Is(err, targetrules.ErrNodesSkipped) && !errors.Is(err, errCacheBehind):
			// The other Nodes were applied; the skipped ones' own changes bring them in.
			klog.V(2).InfoS("Some Nodes are not load balancer targets yet", "key", key, "reason", err)
			t.queue.Forget(key)
		case errors.Is(err, errCacheBehind):
			klog.V(4).InfoS("Load balancer targets wait for the IronCore cache", "key", key, "reason", err)
			t.queue.AddRateLimited(key)
		case err != nil:
			klog.ErrorS(err, "Cannot sync load balancer targets; retrying", "key", key)
			t.queue.AddRateLimited(key)
		default:
			t.queue.Forget(key)
		}
		t.queue.Done(key)
	}
}

func (t *Controller) sync(ctx context.Context, k key) error {
	switch k.kind {
	case labelsKind:
		return t.syncLabels(ctx)
	case nudgeKind:
		return t.syncNudge(ctx)
	case routingKind:
		return t.syncRouting(ctx, k.name)
	case nodeKind:
		return t.syncNode(ctx, k.name)
	case graceEndKind:
		if err := t.syncNode(ctx, k.name); err != nil {
			return err
		}
		// After a restart this process cannot tell whether the Node was a target.
		t.queueAllTargets(0)
	case retainedKind, selectorKind:
		lb, err := t.ironcore.LoadBalancer(ctx, k.name)
		switch {
		case errors.Is(err, ironcore.ErrNotFound):
			return nil
		case err != nil:
			return err
		case k.kind == retainedKind:
			return t.syncRetained(ctx, lb)
		}
		return t.syncSelector(ctx, lb)
	case verifyKind:
		t.markVerify(k.name)
		return t.syncRouting(ctx, k.name)
	}
	return nil
}

// recheckSoon has the Service's routing verified at recheckDelays.
func (t *Controller) recheckSoon(namespace, name string) {
	for attempt, delay := range recheckDelays() {
		t.queue.AddAfter(key{kind: verifyKind, name: serviceName(namespace, name), attempt: attempt}, delay)
	}
}

// routedByCCM tells whether the CCM, not IronCore, writes the Service's routing.
func (t *Controller) routedByCCM(service *corev1.Service) bool {
	return !t.selecting || targetrules.Local(service)
}
