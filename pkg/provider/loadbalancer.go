package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbswitch"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// While IronCore works on a LoadBalancer, the service controller is asked to come back after a
// doubling delay; coming back only reads the cache.
const (
	firstRetryDelay = 250 * time.Millisecond
	maxRetryDelay   = 4 * time.Second
)

// addressWait is how long EnsureLoadBalancer waits, once per LoadBalancer, for its addresses
// before it asks to be retried: every retry is a Warning event users alert on, and waiting on
// every retry would hold the service workers other Services need.
const addressWait = time.Second

// loadBalancers implements the LoadBalancer interface with IronCore LoadBalancers. No method
// waits for IronCore longer than addressWait.
type loadBalancers struct {
	ironcore *ironcore.Client
	settings lbspec.Settings
	targets  targetsapi.Targets
	recorder record.EventRecorder
	// clusterNameFlag is the --cluster-name the service controller passes.
	clusterNameFlag string
	retries         *retryDelays
	notices         targetsapi.Notices
	// addressesReported is set when a controller writes a LoadBalancer's addresses into its
	// Service's status as soon as IronCore allocates them, and warns when that takes long:
	// a Service whose addresses are still pending then needs no retry.
	addressesReported atomic.Bool
}

var _ cloudprovider.LoadBalancer = (*loadBalancers)(nil)

// errNoTargets is returned by a load balancer call before cmd gave the provider its targets
// controller (UseTargets).
var errNoTargets = errors.New("the load balancer targets controller is not set up (Cloud.UseTargets)")

// GetLoadBalancerName returns the name a new LoadBalancer of the Service gets. It makes no
// request; an adopted LoadBalancer of the reference CCM may have an older name.
func (l *loadBalancers) GetLoadBalancerName(_ context.Context, _ string, service *corev1.Service) string {
	return lbspec.Name(service)
}

// GetLoadBalancer reports the Service's LoadBalancer, or (nil, false, nil) when it has none,
// so that a Service whose LoadBalancer is gone can still be deleted.
func (l *loadBalancers) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := l.find(ctx, clusterName, service, true)
	var conflict *lbspec.Problem
	switch {
	case errors.As(err, &conflict):
		// Someone else's LoadBalancer is not the Service's.
		l.warn(service, conflict)
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case lb == nil:
		return nil, false, nil
	}
	return lbspec.Status(lb), true, nil
}

// EnsureLoadBalancer creates or updates the Service's LoadBalancer and returns its addresses,
// or a RetryError while IronCore has not allocated them yet.
//
// Its targets are queued for package lbtargets, whose Node lister is no older than the Nodes
// passed. An existing LoadBalancer carries traffic, so a selector that is to move (adoption, a
// change of --use-nic-selector) moves only once the new one selects every eligible target it
// routes to; until then the Service is retried.
func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if l.targets == nil {
		return nil, errNoTargets
	}
	desired, err := lbspec.Desired(service, l.settings)
	if err != nil {
		return nil, l.report(service, err)
	}
	if len(service.Status.LoadBalancer.Ingress) == 0 {
		l.retries.begin(service.UID)
	}
	// A miss in the cache is not confirmed here: applying a LoadBalancer under the Service's
	// own name creates or updates it alike, so a GET per new Service would buy nothing.
	existing, err := l.findOrAdopt(ctx, clusterName, service, desired)
	if err != nil {
		return nil, l.report(service, err)
	}
	replaced, err := l.replacedBy(ctx, clusterName, service, existing, desired.Spec.Type)
	if err != nil {
		return nil, err
	}
	otherType := existing != nil && existing.Spec.Type != desired.Spec.Type && existing.DeletionTimestamp == nil
	if lbswitch.Next(lbswitch.State{CurrentOfOtherType: otherType, Replaced: len(replaced)}) == lbswitch.Begin {
		// A LoadBalancer of the new type is made beside this one.
		if existing, err = l.successor(ctx, clusterName, service, existing, desired); err != nil {
			return nil, err
		}
	}
	var kept []lbspec.Problem
	if existing != nil {
		if ready, err := l.prepareUpdate(service, existing, desired); !ready || err != nil {
			return nil, err
		}
		desired.Name = existing.Name
		kept = lbspec.KeepAddresses(service, existing, desired)
	}
	l.warnOnce(service, append(lbspec.IgnoredFields(service, existing), kept...))

	// The targets are queued first: a selector that is to move waits for its labels.
	l.syncTargets(service)
	var lb *networkingv1alpha1.LoadBalancer
	waitingForTargets, settling := false, time.Duration(0)
	if existing == nil {
		if err = l.ironcore.CheckServicePrefixes(ctx, lbspec.ServicePrefixes(service, desired), service.Namespace, l.settings.InternalPrefixes); err != nil {
			return nil, l.report(service, err)
		} else if err = l.ironcore.CheckRequestedAddresses(ctx, lbspec.RequestedAddresses(desired)); err != nil {
			return nil, l.report(service, err)
		} else if lb, err = l.apply(ctx, service, desired); err != nil {
			return nil, err
		}
	} else {
		waitingForTargets, settling = l.targets.HoldSelector(existing, desired)
		lb = existing
		if lbspec.NeedsApply(existing, desired) {
			if lb, err = l.apply(ctx, service, desired); err != nil {
				return nil, err
			}
		}
	}

	if settling > 0 {
		return nil, api.NewRetryError(fmt.Sprintf("keeping the NetworkInterface selector of LoadBalancer %s for %s more: its targets carry the label %s, and IronCore's controller is given time to see it", lb.Name, settling.Round(time.Millisecond), keys.LabelLoadBalancerTarget), settling)
	}
	if waitingForTargets {
		return nil, l.retry(service, "keeping the NetworkInterface selector of LoadBalancer %s until its targets carry the label %s", lb.Name, keys.LabelLoadBalancerTarget)
	}
	if len(replaced) > 0 {
		return l.completeSwitch(ctx, service, lb, desired, replaced)
	}
	if !lbspec.Allocated(lb, desired) {
		ready, err := l.waitForAddresses(ctx, service, lb, desired)
		if err != nil {
			return nil, err
		}
		if ready == nil {
			// The repair controller writes the rest into the Service's status on arrival;
			// meanwhile the Service shows what IronCore has allocated, if anything, once it
			// leads somewhere.
			klog.V(2).InfoS("IronCore has not yet allocated the LoadBalancer's addresses; they are reported on arrival", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb))
			return l.unlessNowhere(ctx, service, lb, lbspec.Status(lb))
		}
		lb = ready
	}
	leads, err := l.leadsSomewhere(ctx, service, lb)
	switch {
	case err != nil:
		return nil, err
	case !leads && !l.addressesReported.Load():
		return nil, l.retry(service, "the routing of IronCore LoadBalancer %s holds no destination yet", lb.Name)
	case !leads:
		klog.V(2).InfoS("The LoadBalancer's routing holds no destination yet; its addresses are reported once it does", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb))
		return &corev1.LoadBalancerStatus{}, nil
	}
	if took, ok := l.retries.forget(service.UID); ok {
		metrics.LoadBalancerProvisioning.WithLabelValues(strings.ToLower(string(lb.Spec.Type))).Observe(took.Seconds())
	}
	return lbspec.Status(lb), nil
}

// leadsSomewhere tells whether lb's addresses, if its Service shows none yet, would carry
// traffic (or the rules choose no target, so there is nothing to wait for): an address that
// leads nowhere is an outage to whoever connects. Addresses once shown stay.
func (l *loadBalancers) leadsSomewhere(ctx context.Context, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer) (bool, error) {
	if len(service.Status.LoadBalancer.Ingress) > 0 {
		return true, nil
	}
	return l.routesSomewhere(ctx, service, lb)
}

// routesSomewhere tells whether lb's routing holds a destination, or the target rules choose
// none, whatever addresses the Service shows.
func (l *loadBalancers) routesSomewhere(ctx context.Context, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer) (bool, error) {
	routing, err := l.ironcore.LoadBalancerRouting(ctx, lb.Name)
	switch {
	case err == nil && ironcore.OwnedBy(routing, lb) && ironcore.RoutingDestinationCount(routing) > 0:
		return true, nil
	case err != nil && !errors.Is(err, ironcore.ErrNotFound):
		return false, err
	}
	expects, err := l.targets.Expects(ctx, service)
	if err != nil {
		// Not knowing the targets yet (the endpoints' cache has not synced) is no reason to
		// show an address that may lead nowhere; the Service is looked at again.
		klog.V(2).InfoS("Cannot tell yet whether the LoadBalancer has targets; its addresses wait", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb), "reason", err)
		return false, nil
	}
	return !expects, nil
}

// unlessNowhere returns status, or an empty one if its addresses would lead nowhere.
func (l *loadBalancers) unlessNowhere(ctx context.Context, service *corev1.Service, lb *networkingv1alpha1.LoadBalancer, status *corev1.LoadBalancerStatus) (*corev1.LoadBalancerStatus, error) {
	if len(status.Ingress) == 0 {
		return status, nil
	}
	leads, err := l.leadsSomewhere(ctx, service, lb)
	if err != nil || !leads {
		return &corev1.LoadBalancerStatus{}, err
	}
	return status, nil
}

// waitForAddresses returns lb once IronCore has allocated its addresses, usually within a
// second. Beyond addressWait it returns nil if a controller reports the addresses on arrival,
// and a RetryError otherwise.
func (l *loadBalancers) waitForAddresses(ctx context.Context, service *corev1.Service, lb, desired *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	if l.retries.firstWait(service.UID, lb.UID) {
		uid := lb.UID
		ready, err := l.ironcore.WaitForLoadBalancer(ctx, lb.Name, addressWait, func(seen *networkingv1alpha1.LoadBalancer) bool {
			return seen.UID == uid && lbspec.Allocated(seen, desired)
		})
		if err != nil || ready != nil {
			return ready, err
		}
	}
	if l.addressesReported.Load() {
		return nil, nil
	}
	return nil, l.retry(service, "IronCore has not yet allocated the addresses of LoadBalancer %s", lb.Name)
}

func (l *loadBalancers) apply(ctx context.Context, service *corev1.Service, desired *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	lb, err := l.ironcore.ApplyLoadBalancer(ctx, desired)
	if err != nil {
		return nil, err
	}
	if lb.DeletionTimestamp != nil {
		// The apply met the name's previous LoadBalancer, still being deleted: its addresses
		// are not the Service's to show.
		return nil, l.retry(service, "the previous IronCore LoadBalancer %s is still being deleted", lb.Name)
	}
	klog.V(2).InfoS("Applied IronCore LoadBalancer", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb), "type", lb.Spec.Type)
	return lb, nil
}

// syncTargets queues the Service's targets and reports what their latest sync found. A
// selector moves only once Targets.HoldSelector finds the labels in place.
func (l *loadBalancers) syncTargets(service *corev1.Service) targetsapi.Report {
	return l.targets.Request(service, lbspec.UsesSelector(service, l.settings))
}

// prepareUpdate checks that an existing LoadBalancer can be updated to the desired one; ready is
// false while it cannot be yet. (A type switch makes another: see successor.)
func (l *loadBalancers) prepareUpdate(service *corev1.Service, existing, desired *networkingv1alpha1.LoadBalancer) (bool, error) {
	if existing.DeletionTimestamp != nil {
		return false, l.retry(service, "the previous IronCore LoadBalancer %s is still being deleted", existing.Name)
	}
	if existing.Spec.NetworkRef.Name != desired.Spec.NetworkRef.Name {
		return false, l.report(service, &lbspec.Problem{Reason: ReasonNetworkChanged, Message: fmt.Sprintf(
			"IronCore LoadBalancer %s is on Network %s, not %s as the cloud-config says; a LoadBalancer cannot move, so it is left as it is",
			existing.Name, existing.Spec.NetworkRef.Name, desired.Spec.NetworkRef.Name)})
	}
	return true, nil
}

// UpdateLoadBalancer queues the writes of the Service's targets without waiting. Nodes that
// could not be made targets are named in the returned error, so that the framework retries.
//
// Otherwise it returns cloudprovider.ImplementedElsewhere unwrapped (the service controller
// compares with ==), as with nil it records an UpdatedLoadBalancer event on every Service at
// every node sync. With no Nodes it returns nil, so that it still warns that there are none.
func (l *loadBalancers) UpdateLoadBalancer(_ context.Context, _ string, service *corev1.Service, nodes []*corev1.Node) error {
	if l.targets == nil {
		return errNoTargets
	}
	if err := l.syncTargets(service).Skipped.Err(); err != nil || len(nodes) == 0 {
		return err
	}
	return cloudprovider.ImplementedElsewhere
}

// AllocatedStatus returns the status of the Service's LoadBalancer once all its addresses are
// allocated and lead somewhere; before that, nil and what it waits for, if it waits for
// IronCore. It never writes: a caller that reports addresses must not create a LoadBalancer
// for a Service that is going away.
func (l *loadBalancers) AllocatedStatus(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, lbspec.Pending, error) {
	if l.targets == nil {
		return nil, lbspec.NotPending, errNoTargets
	}
	desired, err := lbspec.Desired(service, l.settings)
	if err != nil {
		return nil, lbspec.NotPending, nil //nolint:nilerr // the Service's syncs report its errors
	}
	lb, err := l.find(ctx, clusterName, service, false)
	var conflict *lbspec.Problem
	switch {
	case errors.As(err, &conflict):
		return nil, lbspec.NotPending, nil
	case err != nil || lb == nil:
		return nil, lbspec.NotPending, err
	case lb.DeletionTimestamp != nil || lb.Spec.Type != desired.Spec.Type:
		return nil, lbspec.NotPending, nil
	case !lbspec.Allocated(lb, desired):
		return nil, lbspec.PendingAddresses, nil
	}
	leads := l.leadsSomewhere
	if replaced, err := l.replacedBy(ctx, clusterName, service, lb, desired.Spec.Type); err != nil {
		return nil, lbspec.NotPending, err
	} else if len(replaced) > 0 {
		// A type switch: the addresses the Service shows are the replaced LoadBalancer's.
		leads = l.routesSomewhere
	}
	if leads, err := leads(ctx, service, lb); err != nil || !leads {
		return nil, lbspec.PendingTraffic, err
	}
	if took, ok := l.retries.forget(service.UID); ok {
		metrics.LoadBalancerProvisioning.WithLabelValues(strings.ToLower(string(lb.Spec.Type))).Observe(took.Seconds())
	}
	return lbspec.Status(lb), lbspec.NotPending, nil
}
