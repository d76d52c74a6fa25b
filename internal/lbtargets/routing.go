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

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// The routing reconciler writes the LoadBalancerRoutings the CCM owns: every one with
// --use-nic-selector=false, and those of Local Services, whose targets are their own. Its keys
// are routing keys, named by the Service's namespace/name, on the label reconciler's queue: one
// sync per Service at a time, retries by the queue. The sync computes the destinations from the
// listers and compares them with the routing as this process knows it newest: the one it last
// wrote while the cache does not show that write yet, else IronCore's.

// routingState is the routing reconciler's memory.
type routingState struct {
	mu sync.Mutex
	// requests holds, by Service namespace/name, the Service of the latest request, for a
	// Service its lister does not show yet or shows older.
	requests map[string]*corev1.Service
	// written holds, by LoadBalancer UID, the routing this process last wrote.
	written map[types.UID]writtenRouting
	// reports holds, by Service, what the latest sync found.
	reports map[string]targetsapi.Report
	// verify holds the Services whose next sync compares with the routing on the API server.
	verify map[string]bool
	// reaching holds the Services whose latest sync left their routing holding a destination,
	// and unaddressed those the lister shows without an address: a routing of an unaddressed
	// Service that is not reaching goes first in the queue (firstQueue). sync.Maps: the queue
	// reads them under its own lock.
	reaching, unaddressed sync.Map
}

// writtenRouting is a routing this process wrote: its digest and the resource version the
// write left, and, for a routing of its first targets, the NetworkInterfaces it names.
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

// requestRouting records the Service as the service controller passes it and queues a sync of
// its LoadBalancerRouting; it records on the Service, and returns, what the latest sync of it
// found. It does not wait for the write.
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

// firstTargets is how many Nodes a Service's first routing holds: those of the chosen it
// holds already, then the longest-standing. It holds them for at most FirstTargetsFor after the LoadBalancer's creation
// while IronCore has given it no address, and, once it has one, for the one write that gives
// the Service its first traffic. No traffic can reach the LoadBalancer before it has an
// address, and a routing with a destination per Node is some 150 bytes per Node to write,
// store and send to every watcher: a burst of new Services' full routings kept IronCore's API
// server busy while IronCore allocated their addresses, and, where the addresses came first,
// each new Service waited for the full routings of those before it. The few Nodes let the
// Service show its address, and have traffic, the moment IronCore gives it; the address
// queues the routing again, to every Node (Run), and so do the end of FirstTargetsFor and the
// first write itself, so that a routing is complete in good time. A Local Service's routing
// always holds the Nodes with its endpoints.
const firstTargets = 3

// DefaultFirstTargetsFor is FirstTargetsFor's default: in a burst of 300 new Services at 1,000
// Nodes on the test stack, most Public addresses came within 25 s, and Internal ones, which
// IronCore allocates from a Prefix, near a minute.
const DefaultFirstTargetsFor = 30 * time.Second

// firstTargetsLeft returns how much longer the routing of the Service's LoadBalancers may hold
// their first Nodes only: none for a Local Service, once one of them has an address, or once
// the oldest is FirstTargetsFor old.
func (t *Controller) firstTargetsLeft(service *corev1.Service, lbs []*networkingv1alpha1.LoadBalancer) time.Duration {
	if targetrules.Local(service) || slices.ContainsFunc(lbs, addressed) {
		return 0
	}
	oldest := slices.MinFunc(lbs, func(a, b *networkingv1alpha1.LoadBalancer) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return max(t.firstFor-time.Since(oldest.CreationTimestamp.Time), 0)
}

// routeNothingYet tells whether none of the LoadBalancers' routings holds a destination: not
// written by this process, and none or empty in the cache. A routing that exists is never cut
// to its first Nodes, so that taking over from another CCM drops no target.
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

// addressed tells whether IronCore has given the LoadBalancer an address.
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
		// One being deleted needs no routing; one that still selects is IronCore's to route
		// (a Service turning Local, before the selector is removed).
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
		// The first write is the one that gives the Service traffic: its first Nodes now. The
		// write's own watch event queues the routing again, to every Node, behind the other new
		// Services' first writes (firstQueue).
		limit = firstTargets
	}
	var routed map[string]bool
	if limit > 0 {
		routed = t.firstTargetsRouted(ctx, lbs)
	}
	destinations, report, err := t.Destinations(ctx, service, t.routedNow(lbs), limit, routed)
	if err != nil {
		return err
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

// syncRetained keeps the routing of a LoadBalancer of this cluster that was retained after its
// Service empty: no Service is served by it, so no Node may get its traffic. Until its selector
// is gone, IronCore writes its routing.
func (t *Controller) syncRetained(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	if !ironcore.Retained(lb) || !t.owners.Retains(lb) || lb.DeletionTimestamp != nil || lb.Spec.NetworkInterfaceSelector != nil {
		return nil
	}
	return t.applyRouting(ctx, nil, lb, []networkingv1alpha1.LoadBalancerDestination{}, false)
}

// routedNow returns the NetworkInterfaces the LoadBalancers' routings send to now, read from
// the API server (the cache keeps no destinations), at most once per sync and only if a Node
// that is not Ready asks.
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

// firstTargetsRouted names the NetworkInterfaces the LoadBalancers' routings hold while they
// hold their first targets only, as the newer of the cache and this process's last write shows
// them: those stay first targets while they can serve, so that a longer-standing Node becoming
// able to serve again takes no Node out.
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

// routingInputs returns the Service of a routing key, the newer of the lister's and the latest
// request's; nil when it does not want a load balancer.
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
		// A Service the lister does not show yet, or no more: its request is used once, so
		// that the key of a deleted Service is forgotten by the next sync.
		t.routing.mu.Lock()
		delete(t.routing.requests, key)
		t.routing.mu.Unlock()
	case err != nil:
		return nil, fmt.Errorf("read Service %s/%s: %w", namespace, name, err)
	case service == nil || !ironcore.NewerVersion(service.ResourceVersion, listed.ResourceVersion):
		// The request's Service wins only where it is newer than the lister's.
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
