// Package orphans deletes, after a grace period, IronCore LoadBalancers of this cluster whose
// Service is gone or no longer wants one. The service controller misses those whose finalizer
// was removed by hand while the CCM was down, and Services moved to another load balancer
// class; without this sweep they, and their addresses, leak.
//
// The cluster name a LoadBalancer records is free-form configuration that two clusters in one
// IronCore namespace may share (Kubernetes' default "kubernetes" makes that likely), so it is
// not enough to delete on. A LoadBalancer is deleted only if it also carries this cluster's
// identity (keys.LabelClusterID, which only this CCM writes) and is on this cluster's Network;
// one that records this cluster's name without them is refused: logged and counted, never
// deleted. With the ambiguous name "kubernetes" the collector reports instead of deleting.
//
// LoadBalancers retained after their Service are never orphans: those past the optional
// retention period are deleted with the same proof of ownership (where the identity label makes
// the ambiguous name harmless), and only on the version read, so that a Service taking one over
// meanwhile keeps it.
package orphans

import (
	"context"
	"fmt"
	"slices"
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

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// Name is the controller's name in --controllers.
const Name = "ironcore-load-balancer-orphans"

// Settings say which LoadBalancers are this cluster's and what to do with its orphans.
type Settings struct {
	// Cluster is the cluster's name and Aliases its earlier names, from the cloud-config.
	Cluster string
	Aliases []string
	// Network is the cloud-config's Network, which all of this cluster's LoadBalancers are on.
	Network string
	// ClusterID is the cluster's identity; the collector decides nothing until it is known.
	ClusterID *clusterid.ID
	// Mode is what to do with orphans, and Grace how long they must have been orphaned first.
	Mode  config.OrphanCleanup
	Grace time.Duration
	// Retention is how long a retained LoadBalancer is kept before it is released; zero keeps
	// it until it is deleted on IronCore. Mode report only reports it.
	Retention time.Duration
}

// Collector sweeps the IronCore LoadBalancers of one cluster.
type Collector struct {
	ironcore  *ironcore.Client
	names     []string
	network   string
	clusterID *clusterid.ID
	services  corelisters.ServiceLister
	synced    toolscache.InformerSynced
	mode      config.OrphanCleanup
	grace     time.Duration
	retention time.Duration
	// reportOnly makes releases of retained LoadBalancers reports.
	reportOnly bool
	// orphanedSince records when each LoadBalancer (by UID) was first seen orphaned.
	orphanedSince map[types.UID]time.Time
	// releaseTold records the retained LoadBalancers past their retention that were reported
	// or refused, so that each is told once.
	releaseTold map[types.UID]bool
}

// New builds a collector on the CCM's Service informer. In delete mode with the ambiguous
// cluster name "kubernetes" it only reports, and says so once.
func New(client *ironcore.Client, services coreinformers.ServiceInformer, settings Settings) *Collector {
	metrics.Register()
	mode := settings.Mode
	if mode == config.OrphanCleanupDelete && settings.Cluster == config.AmbiguousClusterName {
		klog.InfoS("Orphaned IronCore LoadBalancers are only reported, not deleted: the cluster name is Kubernetes' default, "+
			"which other clusters in the IronCore namespace may share; set a unique clusterName in the cloud-config to have them deleted",
			"cluster", settings.Cluster, "orphanLoadBalancerCleanup", settings.Mode)
		mode = config.OrphanCleanupReport
	}
	return &Collector{
		ironcore:      client,
		names:         append([]string{settings.Cluster}, settings.Aliases...),
		network:       settings.Network,
		clusterID:     settings.ClusterID,
		services:      services.Lister(),
		synced:        services.Informer().HasSynced,
		mode:          mode,
		grace:         settings.Grace,
		retention:     settings.Retention,
		reportOnly:    settings.Mode == config.OrphanCleanupReport,
		orphanedSince: map[types.UID]time.Time{},
		releaseTold:   map[types.UID]bool{},
	}
}

// Name implements the controller-manager's controller.Interface.
func (c *Collector) Name() string { return Name }

// Run sweeps periodically until ctx ends, starting once both caches have synced (before that,
// every LoadBalancer would look orphaned) and the cluster's identity is known.
func (c *Collector) Run(ctx context.Context) {
	if !toolscache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced) || !c.ironcore.WaitForCacheSync(ctx) {
		return
	}
	if _, known := c.clusterID.Known(); !known {
		klog.InfoS("Orphan sweeps wait until the cluster's identity is known")
		select {
		case <-c.clusterID.Ready():
		case <-ctx.Done():
			return
		}
	}
	wait.UntilWithContext(ctx, c.Sweep, c.interval())
}

// interval sweeps often enough to act within about half a grace period of its end.
func (c *Collector) interval() time.Duration {
	if c.mode == config.OrphanCleanupOff {
		return time.Minute
	}
	return min(max(c.grace/2, time.Second), time.Minute)
}

// Sweep looks at every LoadBalancer once. Without the cluster's identity it does nothing.
func (c *Collector) Sweep(ctx context.Context) {
	clusterID, known := c.clusterID.Known()
	if !known {
		klog.V(2).InfoS("Skipping the orphan sweep: the cluster's identity is not known yet")
		return
	}
	lbs, err := c.ironcore.LoadBalancers(ctx)
	if err != nil {
		klog.ErrorS(err, "Cannot list IronCore LoadBalancers for the orphan sweep")
		return
	}
	seen := map[types.UID]bool{}
	retained := 0
	for i := range lbs {
		lb := &lbs[i]
		seen[lb.UID] = true
		if ironcore.Retained(lb) {
			// Kept after its Service on purpose: never an orphan.
			delete(c.orphanedSince, lb.UID)
			if lb.Labels[keys.LabelClusterID] == clusterID && lb.DeletionTimestamp == nil {
				retained++
				c.sweepRetained(ctx, lb, clusterID)
			}
			continue
		}
		if c.mode == config.OrphanCleanupOff {
			continue
		}
		orphaned, why, err := c.orphaned(lb, clusterID)
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
		c.act(ctx, lb, why, since, clusterID)
	}
	metrics.RetainedLoadBalancers.Set(float64(retained))
	for uid := range c.orphanedSince {
		if !seen[uid] {
			delete(c.orphanedSince, uid)
		}
	}
	for uid := range c.releaseTold {
		if !seen[uid] {
			delete(c.releaseTold, uid)
		}
	}
}

// sweepRetained deletes a retained lb past the retention period; one without a readable
// retained-at time is kept.
func (c *Collector) sweepRetained(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, clusterID string) {
	if c.retention == 0 || c.releaseTold[lb.UID] {
		return
	}
	at, ok := ironcore.RetainedAt(lb)
	if !ok {
		klog.V(2).InfoS("Retained IronCore LoadBalancer records no time it was retained; keeping it", "loadBalancer", klog.KObj(lb), "annotation", keys.AnnotationRetainedAt)
		return
	}
	if time.Since(at) < c.retention {
		return
	}
	from := lb.Annotations[keys.AnnotationRetainedFrom]
	if refusal := c.refusal(lb, clusterID); refusal != "" {
		klog.InfoS("Not releasing retained IronCore LoadBalancer past its retention: it may be another cluster's; delete it by hand if it is this cluster's",
			"loadBalancer", klog.KObj(lb), "retainedFrom", from, "retainedAt", at, "refusedBecause", refusal)
		metrics.RetainedLoadBalancersReleased.WithLabelValues("refused").Inc()
		c.releaseTold[lb.UID] = true
		return
	}
	if c.reportOnly {
		klog.InfoS("Retained IronCore LoadBalancer is past its retention (report only)", "loadBalancer", klog.KObj(lb), "retainedFrom", from, "retainedAt", at, "retention", c.retention)
		metrics.RetainedLoadBalancersReleased.WithLabelValues("reported").Inc()
		c.releaseTold[lb.UID] = true
		return
	}
	ctx = dryrun.Because(ctx, fmt.Sprintf("retained from %s since %s, past the retention of %s", from, at, c.retention), nil)
	err := c.ironcore.ReleaseRetainedLoadBalancer(ctx, lb)
	if apierrors.IsConflict(err) {
		klog.V(2).InfoS("Retained IronCore LoadBalancer changed since the sweep read it (a Service may have taken it over); looking again next sweep", "loadBalancer", klog.KObj(lb))
		return
	}
	if err != nil {
		klog.ErrorS(err, "Cannot release retained IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "retainedFrom", from)
		metrics.RetainedLoadBalancersReleased.WithLabelValues("failed").Inc()
		return
	}
	klog.InfoS("Released retained IronCore LoadBalancer past its retention; its addresses go back to IronCore", "loadBalancer", klog.KObj(lb),
		"retainedFrom", from, "retainedAt", at, "retention", c.retention)
	metrics.RetainedLoadBalancersReleased.WithLabelValues("deleted").Inc()
}

func (c *Collector) act(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, why string, since time.Time, clusterID string) {
	owner := ironcore.OwnerOf(lb)
	service := klog.KRef(owner.Namespace, owner.Name)
	if refusal := c.refusal(lb, clusterID); refusal != "" {
		klog.InfoS("Not deleting IronCore LoadBalancer that looks orphaned: it may be another cluster's; delete it by hand if it is this cluster's",
			"loadBalancer", klog.KObj(lb), "service", service, "reason", why, "refusedBecause", refusal, "orphanedFor", time.Since(since).Round(time.Second))
		metrics.OrphanedLoadBalancers.WithLabelValues("refused").Inc()
		c.orphanedSince[lb.UID] = time.Now() // again after another grace period, not every sweep
		return
	}
	wished := lb.Labels[keys.LabelRetainRequested] == "true"
	if c.mode == config.OrphanCleanupReport {
		klog.InfoS("Orphaned IronCore LoadBalancer (report only)", "loadBalancer", klog.KObj(lb), "service", service, "reason", why, "orphanedFor", time.Since(since).Round(time.Second), "wouldRetain", wished)
		metrics.OrphanedLoadBalancers.WithLabelValues("reported").Inc()
		c.orphanedSince[lb.UID] = time.Now() // report again after another grace period, not every sweep
		return
	}
	if wished {
		c.retain(ctx, lb, why, since, clusterID)
		return
	}
	ctx = dryrun.Because(ctx, fmt.Sprintf("orphaned for %s: %s (Service %s)", time.Since(since).Round(time.Second), why, service), nil)
	if err := c.ironcore.DeleteLoadBalancer(ctx, lb); err != nil {
		klog.ErrorS(err, "Cannot delete orphaned IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "service", service)
		metrics.OrphanedLoadBalancers.WithLabelValues("failed").Inc()
		return
	}
	klog.InfoS("Deleted orphaned IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "service", service, "reason", why, "orphanedFor", time.Since(since).Round(time.Second))
	metrics.OrphanedLoadBalancers.WithLabelValues("deleted").Inc()
	delete(c.orphanedSince, lb.UID)
}

// retain keeps an orphaned lb whose Service asked to retain it (keys.LabelRetainRequested), as
// the Service's deletion would have, on the version read.
func (c *Collector) retain(ctx context.Context, lb *networkingv1alpha1.LoadBalancer, why string, since time.Time, clusterID string) {
	owner := ironcore.OwnerOf(lb)
	from := owner.Namespace + "/" + owner.Name
	retained, err := c.ironcore.RetainLoadBalancer(ctx, lb, from, time.Now(), clusterID)
	if err != nil {
		klog.ErrorS(err, "Cannot retain orphaned IronCore LoadBalancer whose Service asked to retain it", "loadBalancer", klog.KObj(lb), "service", from)
		metrics.OrphanedLoadBalancers.WithLabelValues("failed").Inc()
		return
	}
	klog.InfoS("Retained orphaned IronCore LoadBalancer: its Service asked to retain it", "loadBalancer", klog.KObj(retained), "service", from,
		"reason", why, "orphanedFor", time.Since(since).Round(time.Second), "addresses", ironcore.Addresses(retained))
	metrics.OrphanedLoadBalancers.WithLabelValues("retained").Inc()
	delete(c.orphanedSince, lb.UID)
}

// refusal says why lb, though orphaned, must not be deleted, or is "" if it may be: it must
// carry this cluster's identity, record this cluster's name and be on this cluster's Network.
func (c *Collector) refusal(lb *networkingv1alpha1.LoadBalancer, clusterID string) string {
	mark, marked := lb.Labels[keys.LabelClusterID]
	owner := ironcore.OwnerOf(lb)
	switch {
	case !marked:
		return fmt.Sprintf("it lacks the label %s that marks this cluster's LoadBalancers (it may be another cluster's of the same name, or a reference CCM's never taken over)", keys.LabelClusterID)
	case mark != clusterID:
		return fmt.Sprintf("its label %s is %q, another cluster's; this cluster's is %q", keys.LabelClusterID, mark, clusterID)
	case !slices.Contains(c.names, owner.Cluster):
		return fmt.Sprintf("it records cluster %q, not this cluster's name", owner.Cluster)
	case lb.Spec.NetworkRef.Name != c.network:
		return fmt.Sprintf("it is on Network %q, not on this cluster's Network %q", lb.Spec.NetworkRef.Name, c.network)
	}
	return ""
}

// orphaned reports whether lb belongs to this cluster, by name or identity, and its Service is
// gone, was replaced by a namesake, or no longer asks this CCM for a load balancer.
// LoadBalancers of other clusters, or not made by a CCM, are never orphans here.
func (c *Collector) orphaned(lb *networkingv1alpha1.LoadBalancer, clusterID string) (bool, string, error) {
	owner := ironcore.OwnerOf(lb)
	ours := slices.Contains(c.names, owner.Cluster) || lb.Labels[keys.LabelClusterID] == clusterID
	if !ours || owner.Namespace == "" || owner.Name == "" || owner.UID == "" {
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
	case lbclass.Foreign(service):
		return true, "the Service has a load balancer class, so another controller serves it", nil
	}
	return false, "", nil
}
