// Package clusterlabel keeps the Machines and NetworkInterfaces behind this cluster's Nodes
// labelled with the cluster name (kubernetes.io/cluster=<name>). Load balancer selectors and
// routes find the cluster's NetworkInterfaces by this label, as with the reference CCM; the
// reference wrote it on every InstanceMetadata call, here it is written once, when missing.
package clusterlabel

import (
	"context"
	"errors"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/machinequeue"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-cluster-label"

// ReasonLabelConflict is the reason of the Warning event on a Node whose Machine or
// NetworkInterface is labelled for another cluster.
const ReasonLabelConflict = "ClusterLabelConflict"

// Controller labels the IronCore objects of this cluster's Nodes.
type Controller struct {
	*machinequeue.Queue
	ironcore *ironcore.Client
	cluster  string
	// routeWait leaves a new Node's NetworkInterface to the write of its route.
	routeWait ironcore.RouteWait
	recorder  record.EventRecorder
}

// New wires the controller to the CCM's Node informer and the IronCore cache: a Node, its
// Machine or one of its NetworkInterfaces changing queues the Machine. routedNetwork names the
// Network on which this CCM routes the Nodes' pod CIDRs (its route controller runs), or is
// empty. Call it before the informers start.
func New(client *ironcore.Client, cluster, routedNetwork string, nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder) (*Controller, error) {
	c := &Controller{ironcore: client, cluster: cluster, recorder: recorder,
		routeWait: ironcore.RouteWait{Network: routedNetwork, Cluster: cluster, For: routeLabelWait}}
	var err error
	if c.Queue, err = machinequeue.New(client, nodeInformer, machinequeue.Spec{
		Name: Name, Failure: "Cannot label IronCore objects with the cluster name", Sync: c.sync, NetworkInterfaces: true,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// sync labels the named Machine and its NetworkInterfaces if a Node of this cluster runs on it.
func (c *Controller) sync(ctx context.Context, machineName string, node *corev1.Node) error {
	machine, nics, _, err := c.ironcore.ReadOnlyNodeMachine(ctx, node, "")
	if err != nil || machine == nil {
		return err
	}
	// The NetworkInterfaces first (one that does not exist yet is labelled when it appears), the
	// Machine last: a labelled Machine tells that its NetworkInterfaces have been seen to.
	objects := make([]client.Object, 0, len(nics)+1)
	for _, nic := range nics {
		objects = append(objects, nic)
	}
	// AddLabel writes the patched Machine back into it: a copy, not the cache's.
	objects = append(objects, machine.DeepCopy())
	var errs []error
	now := time.Now()
	for _, obj := range objects {
		if nic, ok := obj.(*networkingv1alpha1.NetworkInterface); ok {
			if left := c.leftToRoute(node, nic, now); left > 0 {
				c.AddAfter(machineName, left)
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
// Node may well be initialized, and looked at here, before its route is written.
const routeLabelWait = 30 * time.Second

// leftToRoute returns how much longer the NetworkInterface is left to the write of its Node's
// route: while it lacks the cluster label and the route is due (ironcore.RouteWait). Zero means
// it is labelled now.
func (c *Controller) leftToRoute(node *corev1.Node, nic *networkingv1alpha1.NetworkInterface, now time.Time) time.Duration {
	if _, labelled := nic.Labels[keys.LabelCluster]; labelled {
		return 0
	}
	return c.routeWait.Left(node, nic, now)
}
