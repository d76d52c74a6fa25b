package lbtargets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// routingState is the memory of the routing reconciler, which writes the LoadBalancerRoutings
// the CCM owns: all with --use-nic-selector=false, and those of Local Services. A sync compares
// with the routing this process last wrote while the cache does not show that write yet.
type routingState struct {
	mu sync.Mutex
	// requests holds the Service of the latest request, for one the lister shows older or not yet.
	requests map[string]*corev1.Service
	// written holds, by LoadBalancer UID, the routing this process last wrote.
	written map[types.UID]writtenRouting
	// reports holds, by Service, what the latest sync found.
	reports map[string]targetsapi.Report
	// verify holds the Services whose next sync compares with the routing on the API server.
	verify map[string]bool
	// reaching holds the Services whose routing holds a destination, and unaddressed those
	// without an address: an unaddressed Service not reaching goes first in the queue. They are
	// sync.Maps because the queue reads them under its own lock.
	reaching, unaddressed sync.Map
}

// writtenRouting is a routing this process wrote; targets are kept for a first-targets routing.
type writtenRouting struct {
	digest, resourceVersion string
	targets                 []string
}

// Request implements targetsapi.Targets: the target labels if the Service's LoadBalancer
// selects its targets, its routing otherwise.
func (t *Controller) Request(service *corev1.Service, selecting bool) targetsapi.Report {
	if selecting {
		return t.requestLabels(service)
	}
	return t.requestRouting(service)
}

// requestRouting records the Service and queues a sync of its routing; it reports what the
// latest sync found, without waiting for the write.
func (t *Controller) requestRouting(service *corev1.Service) targetsapi.Report {
	key := serviceName(service.Namespace, service.Name)
	t.routing.mu.Lock()
	if t.routing.requests == nil {
		t.routing.requests = map[string]*corev1.Service{}
	}
	t.routing.requests[key] = service
	report := t.routing.reports[key]
	t.routing.mu.Unlock()
	t.queue.Add(routingKey(key))
	t.report(service, report)
	return report
}

// QueueRouting queues a sync of the routing of the Service with the namespace and name.
func (t *Controller) QueueRouting(namespace, name string) {
	t.queue.Add(routingKey(serviceName(namespace, name)))
}

// firstTargets is how many Nodes a Service's first routing holds (those it holds already, then
// the longest-standing), until its LoadBalancer has an address or is FirstTargetsFor old, and
// for the write that gives it its first traffic. A full routing is some 150 bytes per Node for
// IronCore's API server to store and send to every watcher: a burst of new Services' full
// routings slowed their address allocation, and each new Service waited for those before it.
// The address, the end of FirstTargetsFor and the first write all queue the full routing.
const firstTargets = 3

// DefaultFirstTargetsFor is FirstTargetsFor's default: in a burst of 300 new Services at 1,000
// Nodes on the test stack, most Public addresses came within 25 s, and Internal ones, which
// IronCore allocates from a Prefix, near a minute.
const DefaultFirstTargetsFor = 30 * time.Second

// firstTargetsLeft returns how much longer the Service's routings may hold their first Nodes
// only; a Local Service's routing always holds the Nodes with its endpoints.
func (t *Controller) firstTargetsLeft(service *corev1.Service, lbs []*networkingv1alpha1.LoadBalancer) time.Duration {
	if targetrules.Local(service) || slices.ContainsFunc(lbs, addressed) {
		return 0
	}
	oldest := slices.MinFunc(lbs, func(a, b *networkingv1alpha1.LoadBalancer) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return max(t.firstFor-time.Since(oldest.CreationTimestamp.Time), 0)
}

// routeNothingYet tells whether none of the LoadBalancers' routings holds a destination. A
// routing that exists is never cut to its first Nodes, so that taking over from another CCM
// drops no target.
func (t *Controller) routeNothingYet(ctx context.Context, lbs []*networkingv1alpha1.LoadBalancer) bool {
	for _, lb := range lbs {
		t.routing.mu.Lock()
		_, written := t.routing.written[lb.UID]
		t.routing.mu.Unlock()
		if written {
			return false
		}
		// Read only: it is only counted.
		routing, err := t.ironcore.ReadOnlyLoadBalancerRouting(ctx, lb.Name)
		switch {
		case errors.Is(err, ironcore.ErrNotFound):
		case err != nil || ironcore.RoutingDestinationCount(routing) > 0:
			return false
		}
	}
	return true
}

func addressed(lb *networkingv1alpha1.LoadBalancer) bool { return len(lb.Status.IPs) > 0 }

// syncRouting writes the Service's routing if it differs from the desired one.
func (t *Controller) syncRouting(ctx context.Context, key string) error {
	service, err := t.routingInputs(key)
	if err != nil || service == nil {
		return err
	}
	if t.selecting && !targetrules.Local(service) {
		// IronCore writes the routing of a LoadBalancer that selects.
		return nil
	}
	// Two during a type switch: the one the Service's addresses lead to keeps its routing up
	// to date until the other takes over.
	lbs, err := t.ironcore.ServiceLoadBalancers(ctx, t.owners, service)
	if err != nil {
		return err
	}
	lbs = slices.DeleteFunc(lbs, func(lb *networkingv1alpha1.LoadBalancer) bool {
		// IronCore routes one that still selects (a Service turning Local).
		return lb.DeletionTimestamp != nil || lb.Spec.NetworkInterfaceSelector != nil
	})
	if len(lbs) == 0 {
		// Nothing to route to: a LoadBalancer's creation queues this key again.
		return nil
	}
	limit := 0
	switch left := t.firstTargetsLeft(service, lbs); {
	case left > 0:
		limit = firstTargets
		t.queue.AddAfter(routingKey(key), left)
	case !targetrules.Local(service) && t.routeNothingYet(ctx, lbs):
		// The write's own watch event queues the full routing, behind other Services' first
		// writes.
		limit = firstTargets
	}
	var routed map[string]bool
	if limit > 0 {
		routed = t.firstTargetsRouted(ctx, lbs)
	}
	destinations, report, left, err := t.Destinations(ctx, service, t.routedNow(lbs), limit, routed)
	if err != nil {
		return err
	}
	if t.explain {
		why := fmt.Sprintf("the targets of Service %s: %d Nodes", key, report.Targets)
		if limit > 0 {
			why = fmt.Sprintf("the first targets of Service %s: %d of %d Nodes", key, min(limit, report.Targets), report.Targets)
		}
		ctx = dryrun.Because(ctx, why, left.Explain())
	}
	verify := t.takeVerify(key)
	for _, lb := range lbs {
		if err := t.applyRouting(ctx, service, lb, destinations, verify); err != nil {
			if verify {
				t.markVerify(key)
			}
			return err
		}
	}
	t.routing.mu.Lock()
	if t.routing.reports == nil {
		t.routing.reports = map[string]targetsapi.Report{}
	}
	t.routing.reports[key] = report
	t.routing.mu.Unlock()
	if len(destinations) > 0 {
		t.routing.reaching.Store(key, true)
	} else {
		t.routing.reaching.Delete(key)
	}
	t.report(service, report)
	return report.Skipped.Err()
}

// syncRetained keeps the routing of a retained LoadBalancer empty: it serves no Service. Until
// its selector is gone, IronCore writes its routing.
func (t *Controller) syncRetained(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	if !ironcore.Retained(lb) || !t.owners.Retains(lb) || lb.DeletionTimestamp != nil || lb.Spec.NetworkInterfaceSelector != nil {
		return nil
	}
	return t.applyRouting(ctx, nil, lb, []networkingv1alpha1.LoadBalancerDestination{}, false)
}

// routedNow reads the routings' current targets from the API server, as the cache keeps no
// destinations; it is called at most once per sync, and only if a not-Ready Node asks.
func (t *Controller) routedNow(lbs []*networkingv1alpha1.LoadBalancer) targetsNow {
	return func(ctx context.Context) (map[string]bool, error) {
		names := map[string]bool{}
		for _, lb := range lbs {
			routing, err := t.ironcore.LiveLoadBalancerRouting(ctx, lb.Name)
			switch {
			case errors.Is(err, ironcore.ErrNotFound):
				continue
			case err != nil:
				return nil, err
			}
			for _, destination := range routing.Destinations {
				if destination.TargetRef != nil {
					names[destination.TargetRef.Name] = true
				}
			}
		}
		return names, nil
	}
}

// firstTargetsRouted names the NetworkInterfaces of first-targets routings, which stay first
// targets while they can serve, so that a longer-standing Node coming back takes no Node out.
func (t *Controller) firstTargetsRouted(ctx context.Context, lbs []*networkingv1alpha1.LoadBalancer) map[string]bool {
	routed := map[string]bool{}
	for _, lb := range lbs {
		t.routing.mu.Lock()
		last, recorded := t.routing.written[lb.UID]
		t.routing.mu.Unlock()
		names := last.targets
		// Read only: the names are only collected.
		if cached, err := t.ironcore.ReadOnlyLoadBalancerRouting(ctx, lb.Name); err == nil &&
			(!recorded || ironcore.NewerVersion(cached.ResourceVersion, last.resourceVersion)) {
			names, _ = ironcore.RoutingTargets(cached)
		}
		for _, name := range names {
			routed[name] = true
		}
	}
	return routed
}

func (t *Controller) markVerify(key string) {
	t.routing.mu.Lock()
	defer t.routing.mu.Unlock()
	if t.routing.verify == nil {
		t.routing.verify = map[string]bool{}
	}
	t.routing.verify[key] = true
}

func (t *Controller) takeVerify(key string) bool {
	t.routing.mu.Lock()
	defer t.routing.mu.Unlock()
	verify := t.routing.verify[key]
	delete(t.routing.verify, key)
	return verify
}

// applyRouting writes lb's routing with the destinations, unless it holds them already; verify
// compares with the routing on the API server. service is nil for a retained LoadBalancer.
func (t *Controller) applyRouting(ctx context.Context, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer, destinations []networkingv1alpha1.LoadBalancerDestination, verify bool) error {
	network, err := t.ironcore.Network(ctx, lb.Spec.NetworkRef.Name)
	if err != nil {
		return err
	}
	routing := &networkingv1alpha1.LoadBalancerRouting{
		ObjectMeta: metav1.ObjectMeta{
			Name: lb.Name,
			// The label lets a CCM whose other routings IronCore writes watch these alone.
			Labels: map[string]string{keys.LabelRoutingCluster: t.cluster},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: networkingv1alpha1.SchemeGroupVersion.String(),
				Kind:       "LoadBalancer",
				Name:       lb.Name,
				UID:        lb.UID,
			}},
		},
		NetworkRef:   commonv1alpha1.LocalUIDReference{Name: network.Name, UID: network.UID},
		Destinations: destinations,
	}
	var unchanged bool
	if verify {
		unchanged, err = t.routingLiveInPlace(ctx, lb, routing)
	} else {
		unchanged, err = t.routingInPlace(ctx, service, lb, routing)
	}
	if err != nil {
		return err
	}
	if unchanged {
		metrics.LoadBalancerRoutingSyncs.WithLabelValues("unchanged").Inc()
	} else {
		resourceVersion, err := t.ironcore.ApplyLoadBalancerRouting(ctx, routing)
		if err != nil {
			t.forgetRouting(lb.UID)
			return err
		}
		t.routing.mu.Lock()
		if t.routing.written == nil {
			t.routing.written = map[types.UID]writtenRouting{}
		}
		// Applied with force, the routing's network and destinations are what was sent.
		written := writtenRouting{digest: ironcore.RoutingDigest(routing), resourceVersion: resourceVersion}
		if len(destinations) <= firstTargets {
			written.targets, _ = ironcore.RoutingTargets(routing)
		}
		t.routing.written[lb.UID] = written
		t.routing.mu.Unlock()
		if t.deletedMeanwhile(ctx, lb) {
			t.forgetRouting(lb.UID)
		}
		metrics.LoadBalancerRoutingSyncs.WithLabelValues("changed").Inc()
		if service == nil {
			klog.V(2).InfoS("Emptied the IronCore LoadBalancerRouting of a retained LoadBalancer", "loadBalancer", klog.KObj(lb))
		} else {
			klog.V(2).InfoS("Applied IronCore LoadBalancerRouting", "loadBalancer", klog.KObj(lb), "service", klog.KObj(service), "destinations", len(destinations))
		}
	}
	return nil
}

// routingInputs returns the newer of the lister's and the latest request's Service, or nil
// when it does not want a load balancer.
func (t *Controller) routingInputs(key string) (*corev1.Service, error) {
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, nil //nolint:nilerr // a malformed key cannot be retried into shape
	}
	t.routing.mu.Lock()
	service := t.routing.requests[key]
	t.routing.mu.Unlock()
	listed, err := t.listers.services.Services(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err) && service == nil:
		t.forgetRoutingKey(key)
		return nil, nil
	case apierrors.IsNotFound(err):
		// The request is used once, so that a deleted Service's key is forgotten next sync.
		t.routing.mu.Lock()
		delete(t.routing.requests, key)
		t.routing.mu.Unlock()
	case err != nil:
		return nil, fmt.Errorf("read Service %s/%s: %w", namespace, name, err)
	case service == nil || !ironcore.NewerVersion(service.ResourceVersion, listed.ResourceVersion):
		service = listed
	}
	if service == nil || !t.class.Wants(service) {
		t.forgetRoutingKey(key)
		if service != nil {
			t.notices.Forget(service.UID)
		}
		return nil, nil
	}
	return service, nil
}
