// Package clusterlabel keeps the Machines and NetworkInterfaces behind this cluster's Nodes
// labelled with the cluster name (kubernetes.io/cluster=<name>). Load balancer selectors and
// routes find the cluster's NetworkInterfaces by this label, as with the reference CCM; the
// reference wrote it on every InstanceMetadata call, here it is written once, when missing.
package clusterlabel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-cluster-label"

// ReasonLabelConflict is the reason of the Warning event on a Node whose Machine or
// NetworkInterface is labelled for another cluster.
const ReasonLabelConflict = "ClusterLabelConflict"

const nodesByMachineIndex = "ironcore-machine"

// Controller labels the IronCore objects of this cluster's Nodes.
type Controller struct {
	ironcore *ironcore.Client
	cluster  string
	// routedNetwork is the Network on which this CCM routes the Nodes' pod CIDRs, or empty.
	routedNetwork string
	nodes         toolscache.Indexer
	synced        toolscache.InformerSynced
	recorder      record.EventRecorder
	queue         workqueue.TypedRateLimitingInterface[string]
}

// New wires the controller to the CCM's Node informer and the IronCore cache. routedNetwork
// names the Network on which this CCM routes the Nodes' pod CIDRs (its route controller runs),
// or is empty. Call it before the informers start.
func New(client *ironcore.Client, cluster, routedNetwork string, nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder) (*Controller, error) {
	c := &Controller{
		ironcore:      client,
		cluster:       cluster,
		routedNetwork: routedNetwork,
		recorder:      recorder,
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
		AddFunc:    enqueueNode,
		UpdateFunc: func(_, newObj any) { enqueueNode(newObj) },
	}); err != nil {
		return nil, err
	}
	if err := client.OnMachineChange(func(machine *computev1alpha1.Machine) { c.queue.Add(machine.Name) }); err != nil {
		return nil, err
	}
	if err := client.OnNetworkInterfaceChange(func(nic *networkingv1alpha1.NetworkInterface) {
		if nic.Spec.MachineRef != nil {
			c.queue.Add(nic.Spec.MachineRef.Name)
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// machineOfNode indexes a Node by the name of its Machine, if its provider ID points into
// this cluster's IronCore namespace.
func (c *Controller) machineOfNode(obj any) ([]string, error) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Spec.ProviderID == "" {
		return nil, nil
	}
	// A Node of another provider or IronCore namespace has no Machine of ours: not indexed.
	id, parseErr := providerid.Parse(node.Spec.ProviderID)
	if parseErr != nil || id.Namespace != c.ironcore.Namespace() {
		return nil, nil //nolint:nilerr // not an indexing failure
	}
	return []string{id.Machine}, nil
}

// Name implements the controller-manager's controller.Interface.
func (c *Controller) Name() string { return Name }

// Run processes the queue with the given number of workers until ctx ends.
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
			klog.ErrorS(err, "Cannot label IronCore objects with the cluster name", "machine", klog.KRef(c.ironcore.Namespace(), machine))
			c.queue.AddRateLimited(machine)
		} else {
			c.queue.Forget(machine)
		}
		c.queue.Done(machine)
	}
}

// sync labels the named Machine and its NetworkInterfaces if a Node of this cluster runs on it.
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
	// The NetworkInterfaces first, the Machine last: a labelled Machine tells that its
	// NetworkInterfaces have been seen to.
	var objects []client.Object
	for _, name := range computev1alpha1.MachineNetworkInterfaceNames(machine) {
		nic, err := c.ironcore.NetworkInterface(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue // labelled when it appears
		}
		if err != nil {
			return err
		}
		objects = append(objects, nic)
	}
	objects = append(objects, machine)
	var errs []error
	now := time.Now()
	for _, obj := range objects {
		if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
			if left := leftToRoute(c.routedNetwork, node, nic, now); left > 0 {
				c.queue.AddAfter(machineName, left)
				continue
			}
		}
		added, err := c.ironcore.AddLabel(ctx, obj, keys.LabelCluster, c.cluster)
		switch {
		case errors.Is(err, ironcore.ErrLabelConflict):
			c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonLabelConflict,
				"Not labelling IronCore object for this cluster, it belongs to another: %v", err)
		case err != nil:
			errs = append(errs, err)
		case added:
			klog.V(2).InfoS("Labelled IronCore object with the cluster name", "object", klog.KObj(obj), "node", klog.KObj(node), "cluster", c.cluster)
		}
	}
	return errors.Join(errs...)
}

// routeLabelWait is how long after a Node's creation its NetworkInterface on the routed Network
// is left to the write of the Node's route, which labels it for the cluster as well (see
// pkg/provider's CreateRoute): labelled here first, it would be written twice, and a new
// Node is initialized, and labelled here, before its route is written more often than not.
// A route not written by then is no reason to leave the label out any longer.
const routeLabelWait = 30 * time.Second

// leftToRoute returns how much longer the NetworkInterface is left to the write of its Node's
// route: while it is on the routed Network without the cluster label and without one of the
// Node's pod CIDRs among its prefixes, until the Node is routeLabelWait old. Zero means it is
// labelled now.
func leftToRoute(routedNetwork string, node *corev1.Node, nic *networkingv1alpha1.NetworkInterface, now time.Time) time.Duration {
	if routedNetwork == "" || nic.Spec.NetworkRef.Name != routedNetwork || len(node.Spec.PodCIDRs) == 0 {
		return 0
	}
	if _, labelled := nic.Labels[keys.LabelCluster]; labelled {
		return 0
	}
	left := node.CreationTimestamp.Add(routeLabelWait).Sub(now)
	if left <= 0 {
		return 0
	}
	for _, cidr := range node.Spec.PodCIDRs {
		if !hasPrefix(nic, cidr) {
			return left
		}
	}
	return 0
}

// hasPrefix tells whether cidr is a literal prefix of the NetworkInterface.
func hasPrefix(nic *networkingv1alpha1.NetworkInterface, cidr string) bool {
	want, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(nic.Spec.Prefixes, func(source networkingv1alpha1.PrefixSource) bool {
		return source.Value != nil && source.Value.Masked() == want.Masked()
	})
}
