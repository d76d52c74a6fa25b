// Package lbrepair brings a Service's load balancer back in line when IronCore changes under
// it: the upstream service controller syncs only when the Service or the Nodes change, so a
// LoadBalancer deleted out of band, or addresses IronCore allocates late, would otherwise wait
// for the Service's next edit. Targets are package lbtargets' business.
package lbrepair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	servicehelpers "k8s.io/cloud-provider/service/helpers"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-load-balancer-repair"

// Reasons of the Warning events on Services: the LoadBalancer was deleted outside the CCM, or
// has waited longer than AddressPendingWarning for its addresses.
const (
	ReasonRecreated      = "LoadBalancerRecreated"
	ReasonAddressPending = "LoadBalancerAddressPending"
)

// AddressPendingWarning is how long a Service waits for its LoadBalancer's addresses before a
// Warning event says so. IronCore usually takes seconds.
const AddressPendingWarning = time.Minute

// Config wires the controller.
type Config struct {
	IronCore *ironcore.Client
	// LoadBalancers is the provider's implementation, called as the service controller calls it.
	LoadBalancers cloudprovider.LoadBalancer
	// ClusterName is the --cluster-name the service controller passes to LoadBalancers.
	ClusterName string
	// Class says which Services are this CCM's.
	Class    lbclass.Policy
	Services coreinformers.ServiceInformer
	Nodes    coreinformers.NodeInformer
	// AllocatedStatus is the status of the Service's LoadBalancer once IronCore has allocated
	// its addresses, or nil and what it waits for; it never writes.
	AllocatedStatus func(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, lbspec.Pending, error)
	// ReleaseReplaced deletes the LoadBalancers a type switch of the Service replaced, once the
	// Service shows the new one's addresses; nil does nothing.
	ReleaseReplaced func(ctx context.Context, clusterName string, service *corev1.Service) error
	// Replacing tells, without reading the Service from the API server, whether it has
	// LoadBalancers of more than one type, so that ReleaseReplaced may have something to do;
	// nil: the Service is read and ReleaseReplaced called on every sync.
	Replacing func(ctx context.Context, clusterName string, service *corev1.Service) (bool, error)
	// PendingWarning overrides AddressPendingWarning when positive.
	PendingWarning time.Duration
	// Client writes the addresses of new and recreated LoadBalancers into their Services' status.
	Client   kubernetes.Interface
	Recorder record.EventRecorder
}

// Controller is the repair controller.
type Controller struct {
	Config
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	synced   []toolscache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	// recreating holds the Services whose LoadBalancer is being recreated, so that the
	// event is recorded once, not on every retry.
	recreating sync.Map
	// pendingSince holds when a Service's LoadBalancer was first found without all its
	// addresses; warnedPending, the Services warned about it.
	pendingSince, warnedPending sync.Map
	// written holds each Service as this controller's last status write left it, until the
	// lister shows that write: a sync on an older lister copy would write the same addresses
	// again, refused.
	written sync.Map
}

// New registers the controller's event handlers. Call it before the informers start.
func New(config Config) (*Controller, error) {
	c := &Controller{
		Config:   config,
		services: config.Services.Lister(),
		nodes:    config.Nodes.Lister(),
		synced:   []toolscache.InformerSynced{config.Services.Informer().HasSynced, config.Nodes.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
	}
	if err := config.IronCore.OnLoadBalancerDelete(c.loadBalancerDeleted); err != nil {
		return nil, err
	}
	if err := config.IronCore.OnLoadBalancerAddedOrAddressed(c.loadBalancerAddressed); err != nil {
		return nil, err
	}
	if err := config.IronCore.OnLoadBalancerRoutingWritten(c.routingWritten); err != nil {
		return nil, err
	}
	// The service controller writes a Service's status from a sync that may have begun before
	// the addresses arrived; a status that no longer shows them is looked at again.
	if _, err := config.Services.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Service)
			service, ok2 := newObj.(*corev1.Service)
			if ok1 && ok2 && c.Class.Wants(service) && !equality.Semantic.DeepEqual(old.Status.LoadBalancer, service.Status.LoadBalancer) {
				c.queue.Add(service.Namespace + "/" + service.Name)
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Name implements the controller-manager's controller.Interface.
func (c *Controller) Name() string { return Name }

// loadBalancerDeleted queues the Service a deleted LoadBalancer was made for, if it exists.
func (c *Controller) loadBalancerDeleted(lb *networkingv1alpha1.LoadBalancer) {
	owner := ironcore.OwnerOf(lb)
	if owner.Namespace == "" || owner.Name == "" {
		return
	}
	service, err := c.services.Services(owner.Namespace).Get(owner.Name)
	if err != nil || string(service.UID) != owner.UID {
		return
	}
	if wantsInternal := service.Annotations[keys.AnnotationInternalLoadBalancer] == "true"; wantsInternal != (lb.Spec.Type == networkingv1alpha1.LoadBalancerTypeInternal) {
		// The CCM itself deletes a LoadBalancer of the other type when the Service switches
		// between Public and Internal; the service controller creates the new one.
		return
	}
	klog.V(2).InfoS("IronCore LoadBalancer of a Service was deleted", "loadBalancer", klog.KObj(lb), "service", klog.KObj(service))
	c.queue.Add(owner.Namespace + "/" + owner.Name)
}

// loadBalancerAddressed queues the Service of a new or readdressed LoadBalancer if the Service
// does not show its addresses.
func (c *Controller) loadBalancerAddressed(lb *networkingv1alpha1.LoadBalancer) {
	owner := ironcore.OwnerOf(lb)
	if owner.Namespace == "" || owner.Name == "" {
		return
	}
	service, err := c.services.Services(owner.Namespace).Get(owner.Name)
	if err != nil || string(service.UID) != owner.UID || shows(service, lb) {
		return
	}
	c.queue.Add(owner.Namespace + "/" + owner.Name)
}

// routingWritten queues the Service of the routing's LoadBalancer (they share the name): its
// addresses may wait for the routing's first destination.
func (c *Controller) routingWritten(name string) {
	lb, err := c.IronCore.LoadBalancer(context.Background(), name)
	if err != nil {
		return
	}
	c.loadBalancerAddressed(lb)
}

// shows reports whether the Service's status has exactly the LoadBalancer's addresses.
func shows(service *corev1.Service, lb *networkingv1alpha1.LoadBalancer) bool {
	ingress := service.Status.LoadBalancer.Ingress
	if len(ingress) != len(lb.Status.IPs) || len(ingress) == 0 {
		return false
	}
	for i, ip := range lb.Status.IPs {
		if ingress[i].IP != ip.String() {
			return false
		}
	}
	return true
}

// Run processes the queue with the given number of workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced...) || !c.IronCore.WaitForCacheSync(ctx) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, c.work, time.Second)
	}
	<-ctx.Done()
}

func (c *Controller) work(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		retryAfter, err := c.sync(ctx, key)
		switch {
		case err != nil:
			klog.ErrorS(err, "Cannot repair the load balancer of a Service", "service", key)
			c.queue.AddRateLimited(key)
		case retryAfter > 0:
			c.queue.Forget(key)
			c.queue.AddAfter(key, retryAfter)
		default:
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// sync repairs one Service, returning a delay to come back after while IronCore works.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil //nolint:nilerr // a malformed key cannot be retried into shape
	}
	service, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	retryAfter, err := c.syncService(ctx, key, c.newest(key, service))
	if !apierrors.IsConflict(err) {
		return retryAfter, err
	}
	// The lister is behind a write to the Service, usually the service controller's status
	// patch: decide once more on the API server's copy rather than retry refused writes.
	live, ok, err := c.liveService(ctx, service)
	if !ok || err != nil {
		return 0, err
	}
	return c.syncService(ctx, key, live)
}

func (c *Controller) syncService(ctx context.Context, key string, service *corev1.Service) (time.Duration, error) {
	if !c.Class.Wants(service) {
		c.forget(key)
		return 0, nil
	}
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return 0, fmt.Errorf("list Nodes: %w", err)
	}
	nodes := slices.DeleteFunc(all, func(node *corev1.Node) bool { return !targetrules.Eligible(node) })
	_, exists, err := c.LoadBalancers.GetLoadBalancer(ctx, c.ClusterName, service)
	if err != nil {
		return 0, err
	}
	_, recreating := c.recreating.Load(key)
	switch {
	case exists && !recreating:
		return c.reportAddresses(ctx, key, service)
	case !exists && len(service.Status.LoadBalancer.Ingress) == 0:
		// Never provisioned: the service controller is still on it.
		return 0, nil
	case !recreating:
		c.recreating.Store(key, true)
		c.Recorder.Event(service, corev1.EventTypeWarning, ReasonRecreated,
			"The Service's IronCore LoadBalancer was deleted outside the CCM; creating a new one. A Public LoadBalancer gets a new address.")
	}
	retryAfter, err := c.recreate(ctx, service, nodes)
	if err == nil && retryAfter == 0 {
		c.recreating.Delete(key)
	}
	return retryAfter, err
}

// reportAddresses writes the LoadBalancer's allocated addresses into the Service's status: the
// service controller does not come back for them, as the provider returns what is allocated
// so far rather than a retry it would report as a Warning. It never creates a LoadBalancer:
// the Service may be going away.
func (c *Controller) reportAddresses(ctx context.Context, key string, service *corev1.Service) (time.Duration, error) {
	status, pending, err := c.AllocatedStatus(ctx, c.ClusterName, service)
	if err != nil {
		return 0, err
	}
	switch pending {
	case lbspec.PendingAddresses:
		return c.pending(key, service), nil
	case lbspec.PendingTraffic:
		// routingWritten brings the Service back; the recheck covers targets that went away.
		return trafficRecheck, nil
	}
	c.pendingSince.Delete(key)
	c.warnedPending.Delete(key)
	if status == nil {
		return 0, nil
	}
	if !equality.Semantic.DeepEqual(service.Status.LoadBalancer, *status) {
		return 0, c.writeStatus(ctx, service, status)
	}
	if c.ReleaseReplaced == nil {
		return 0, nil
	}
	if c.Replacing != nil {
		// No type switch under way: nothing to release, and no read of the Service.
		if replacing, err := c.Replacing(ctx, c.ClusterName, service); err != nil || !replacing {
			return 0, err
		}
	}
	// Deleting is decided on the Service as the API server has it: to a Service cache behind a
	// type switch, the new LoadBalancer looks like the one the switch replaced.
	live, ok, err := c.liveService(ctx, service)
	if !ok || err != nil {
		return 0, err
	}
	return 0, c.ReleaseReplaced(ctx, c.ClusterName, live)
}

// liveService reads the Service from the API server, past the lister; ok is false if it is gone,
// or its name is another Service's now.
func (c *Controller) liveService(ctx context.Context, service *corev1.Service) (live *corev1.Service, ok bool, err error) {
	live, err = c.Client.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read Service %s/%s: %w", service.Namespace, service.Name, err)
	}
	return live, live.UID == service.UID, nil
}

// trafficRecheck is how soon a Service waiting for its routing's first destination is looked at
// again without a routing write.
const trafficRecheck = 5 * time.Second

// pending warns once the Service's addresses have been pending for PendingWarning, and returns
// when to look again until then.
func (c *Controller) pending(key string, service *corev1.Service) time.Duration {
	bound := c.PendingWarning
	if bound <= 0 {
		bound = AddressPendingWarning
	}
	since, _ := c.pendingSince.LoadOrStore(key, time.Now())
	waited := time.Since(since.(time.Time))
	if waited < bound {
		return bound - waited
	}
	if _, warned := c.warnedPending.LoadOrStore(key, true); !warned {
		c.Recorder.Eventf(service, corev1.EventTypeWarning, ReasonAddressPending,
			"IronCore has not allocated all addresses of the Service's LoadBalancer for %s; they are written into the Service's status as soon as it does",
			waited.Round(time.Second))
	}
	return 0
}

// newest is the lister's copy of the Service, or the one this controller's last status write
// left if that is newer.
func (c *Controller) newest(key string, listed *corev1.Service) *corev1.Service {
	last, ok := c.written.Load(key)
	if !ok {
		return listed
	}
	if written := last.(*corev1.Service); written.UID == listed.UID && ironcore.NewerVersion(written.ResourceVersion, listed.ResourceVersion) {
		return written
	}
	c.written.Delete(key)
	return listed
}

func (c *Controller) forget(key string) {
	c.written.Delete(key)
	c.recreating.Delete(key)
	c.pendingSince.Delete(key)
	c.warnedPending.Delete(key)
}

// recreate ensures the LoadBalancer as the service controller would. It reads the Service live
// first: for one going away, a LoadBalancer created now would outlive it.
func (c *Controller) recreate(ctx context.Context, service *corev1.Service, nodes []*corev1.Node) (time.Duration, error) {
	live, ok, err := c.liveService(ctx, service)
	if err != nil {
		return 0, err
	}
	if !ok || !c.Class.Wants(live) || !slices.Contains(live.Finalizers, servicehelpers.LoadBalancerCleanupFinalizer) {
		klog.V(2).InfoS("Not recreating the LoadBalancer of a Service that is going away", "service", klog.KObj(service))
		return 0, nil
	}
	status, err := c.LoadBalancers.EnsureLoadBalancer(ctx, c.ClusterName, live, nodes)
	var retry *api.RetryError
	if errors.As(err, &retry) {
		return retry.RetryAfter(), nil
	}
	if err != nil {
		return 0, err
	}
	return 0, c.writeStatus(ctx, live, status)
}

// writeStatus patches the Service's load balancer status with the resourceVersion it was
// computed from, so that it fails rather than undo the service controller's newer write.
func (c *Controller) writeStatus(ctx context.Context, service *corev1.Service, status *corev1.LoadBalancerStatus) error {
	if equality.Semantic.DeepEqual(service.Status.LoadBalancer, *status) {
		return nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": service.ResourceVersion},
		"status":   map[string]any{"loadBalancer": status},
	})
	if err != nil {
		return err
	}
	written, err := c.Client.CoreV1().Services(service.Namespace).Patch(ctx, service.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("write the addresses of Service %s/%s: %w", service.Namespace, service.Name, err)
	}
	if key, err := toolscache.MetaNamespaceKeyFunc(written); err == nil {
		c.written.Store(key, written)
	}
	klog.InfoS("Reported the addresses of a Service's IronCore LoadBalancer", "service", klog.KObj(service), "ingress", status.Ingress)
	return nil
}
