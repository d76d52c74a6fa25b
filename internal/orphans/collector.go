// Package orphans finds IronCore LoadBalancers of this cluster whose Service is gone or no
// longer wants one, and deletes them after a grace period. The service controller deletes a
// Service's LoadBalancer when the Service goes, but not when the CCM was down at that moment
// and the Service's finalizer was removed by hand, nor when a Service moved to another
// load balancer class; without this sweep such LoadBalancers, and their addresses, leak.
package orphans

import (
	"context"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-load-balancer-orphans"

// Collector sweeps the IronCore LoadBalancers of one cluster.
type Collector struct {
	ironcore *ironcore.Client
	cluster  string
	services corelisters.ServiceLister
	synced   toolscache.InformerSynced
	mode     config.OrphanCleanup
	grace    time.Duration
	// orphanedSince records when each LoadBalancer (by UID) was first seen orphaned.
	orphanedSince map[types.UID]time.Time
}

// New builds a collector on the CCM's Service informer.
func New(client *ironcore.Client, cluster string, services coreinformers.ServiceInformer, mode config.OrphanCleanup, grace time.Duration) *Collector {
	metrics.Register()
	return &Collector{
		ironcore:      client,
		cluster:       cluster,
		services:      services.Lister(),
		synced:        services.Informer().HasSynced,
		mode:          mode,
		grace:         grace,
		orphanedSince: map[types.UID]time.Time{},
	}
}

// Name implements the controller-manager's controller.Interface.
func (c *Collector) Name() string { return Name }

// Run sweeps periodically until ctx ends, starting once both caches have synced: before that,
// every LoadBalancer would look orphaned.
func (c *Collector) Run(ctx context.Context) {
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced) || !c.ironcore.WaitForCacheSync(ctx) {
		return
	}
	wait.UntilWithContext(ctx, c.Sweep, c.interval())
}

// interval sweeps often enough to act within about half a grace period of its end.
func (c *Collector) interval() time.Duration {
	return min(max(c.grace/2, time.Second), time.Minute)
}

// Sweep looks at every LoadBalancer once.
func (c *Collector) Sweep(ctx context.Context) {
	lbs, err := c.ironcore.LoadBalancers(ctx)
	if err != nil {
		klog.ErrorS(err, "Cannot list IronCore LoadBalancers for the orphan sweep")
		return
	}
	seen := map[types.UID]bool{}
	for i := range lbs {
		lb := &lbs[i]
		seen[lb.UID] = true
		orphaned, why, err := c.orphaned(lb)
		if err != nil {
			klog.ErrorS(err, "Cannot tell whether an IronCore LoadBalancer is orphaned", "loadBalancer", klog.KObj(lb))
			continue
		}
		if !orphaned || lb.DeletionTimestamp != nil {
			delete(c.orphanedSince, lb.UID)
			continue
		}
		since, known := c.orphanedSince[lb.UID]
		if !known {
			c.orphanedSince[lb.UID] = time.Now()
			klog.V(2).InfoS("IronCore LoadBalancer looks orphaned; waiting for the grace period", "loadBalancer", klog.KObj(lb), "reason", why, "gracePeriod", c.grace)
			continue
		}
		if time.Since(since) < c.grace {
			continue
		}
		c.act(ctx, lb, why, since)
	}
	for uid := range c.orphanedSince {
		if !seen[uid] {
			delete(c.orphanedSince, uid)
		}
	}
}

func (c *Collector) act(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, why string, since time.Time) {
	owner := ironcore.OwnerOf(lb)
	service := klog.KRef(owner.Namespace, owner.Name)
	if c.mode == config.OrphanCleanupReport {
		klog.InfoS("Orphaned IronCore LoadBalancer (report only)", "loadBalancer", klog.KObj(lb), "service", service, "reason", why, "orphanedFor", time.Since(since).Round(time.Second))
		metrics.OrphanedLoadBalancers.WithLabelValues("reported").Inc()
		c.orphanedSince[lb.UID] = time.Now() // report again after another grace period, not every sweep
		return
	}
	if err := c.ironcore.DeleteLoadBalancer(ctx, lb); err != nil {
		klog.ErrorS(err, "Cannot delete orphaned IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "service", service)
		metrics.OrphanedLoadBalancers.WithLabelValues("failed").Inc()
		return
	}
	klog.InfoS("Deleted orphaned IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "service", service, "reason", why, "orphanedFor", time.Since(since).Round(time.Second))
	metrics.OrphanedLoadBalancers.WithLabelValues("deleted").Inc()
	delete(c.orphanedSince, lb.UID)
}

// orphaned reports whether lb belongs to this cluster and its Service is gone, was replaced by
// a namesake, or no longer asks this CCM for a load balancer. LoadBalancers of other clusters,
// or not made by a CCM, are never orphans here.
func (c *Collector) orphaned(lb *networkingv1alpha1.LoadBalancer) (bool, string, error) {
	owner := ironcore.OwnerOf(lb)
	if owner.Cluster != c.cluster || owner.Namespace == "" || owner.Name == "" || owner.UID == "" {
		return false, "", nil
	}
	service, err := c.services.Services(owner.Namespace).Get(owner.Name)
	switch {
	case apierrors.IsNotFound(err):
		return true, "the Service does not exist", nil
	case err != nil:
		return false, "", err
	case string(service.UID) != owner.UID:
		return true, "the Service was deleted and re-created", nil
	case service.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return true, "the Service is no longer of type LoadBalancer", nil
	case service.Spec.LoadBalancerClass != nil:
		return true, "the Service has a load balancer class, so another controller serves it", nil
	}
	return false, "", nil
}
