package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	"github.com/ironcore-dev/ironcore/utils/equality"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// While IronCore works on a LoadBalancer, the service controller is asked to come back after
// a delay that starts short, for a fast IronCore, and doubles up to a limit, for a slow one.
// Coming back costs no IronCore request: it reads the cache.
const (
	firstRetryDelay = 250 * time.Millisecond
	maxRetryDelay   = 4 * time.Second
)

// addressWait is how long EnsureLoadBalancer waits for IronCore to allocate a LoadBalancer's
// addresses before it asks to be retried. IronCore takes well under a second when it is not
// overloaded; every retry becomes a Warning event on the Service, which users alert on, so
// the normal path should not retry. The wait holds one service worker, watching the cache,
// so each LoadBalancer is waited for once: waiting on every retry would hold the workers
// other Services need.
const addressWait = time.Second

// loadBalancers implements the LoadBalancer interface with IronCore LoadBalancers. No method
// waits for IronCore longer than addressWait: beyond, EnsureLoadBalancer returns a
// RetryError. Waiting for the shared target labels (a moving selector, UpdateLoadBalancer)
// is waiting for this CCM's own writes.
type loadBalancers struct {
	ironcore *ironcore.Client
	settings loadBalancerSettings
	targets  *lbtargets.Targets
	recorder record.EventRecorder
	// recheck, if set, has a Service's targets synced again shortly (see recheckSoon). It is
	// set when the controller that does it starts, while syncs may already run.
	recheck atomic.Pointer[func(*corev1.Service)]
	retries retryDelays
	notices notices
	// addressesReported is set when a controller writes a LoadBalancer's addresses into its
	// Service's status as soon as IronCore allocates them, and warns when that takes long:
	// a Service whose addresses are still pending then needs no retry.
	addressesReported atomic.Bool
}

// retryDelays remembers, per Service, how long the last retry delay was, which LoadBalancer
// EnsureLoadBalancer last waited for, and when this process began provisioning it.
type retryDelays struct {
	mu      sync.Mutex
	delays  map[types.UID]time.Duration
	waited  map[types.UID]types.UID
	started map[types.UID]time.Time
}

// firstWait reports whether EnsureLoadBalancer has not yet waited for the addresses of the
// Service's LoadBalancer lb, and records that it does now.
func (r *retryDelays) firstWait(uid, lb types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waited == nil {
		r.waited = map[types.UID]types.UID{}
	}
	if r.waited[uid] == lb {
		return false
	}
	r.waited[uid] = lb
	return true
}

// next returns the delay for the Service's next retry.
func (r *retryDelays) next(uid types.UID) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.delays == nil {
		r.delays = map[types.UID]time.Duration{}
	}
	delay := firstRetryDelay
	if previous, ok := r.delays[uid]; ok {
		delay = min(2*previous, maxRetryDelay)
	}
	r.delays[uid] = delay
	return delay
}

// begin records when provisioning of the Service's LoadBalancer began, unless it already did.
func (r *retryDelays) begin(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started == nil {
		r.started = map[types.UID]time.Time{}
	}
	if _, ok := r.started[uid]; !ok {
		r.started[uid] = time.Now()
	}
}

// forget resets the Service's delay, once it needs no more retries, and returns how long
// provisioning took if it had begun.
func (r *retryDelays) forget(uid types.UID) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.delays, uid)
	delete(r.waited, uid)
	started, ok := r.started[uid]
	delete(r.started, uid)
	return time.Since(started), ok
}

func (l *loadBalancers) retry(service *corev1.Service, format string, args ...any) error {
	delay := l.retries.next(service.UID)
	return api.NewRetryError(fmt.Sprintf(format, args...)+fmt.Sprintf("; checking again in %s", delay), delay)
}

var _ cloudprovider.LoadBalancer = (*loadBalancers)(nil)

// GetLoadBalancerName returns the name a new LoadBalancer of the Service gets. It makes no
// request; an adopted LoadBalancer of the reference CCM may have an older name.
func (l *loadBalancers) GetLoadBalancerName(_ context.Context, _ string, service *corev1.Service) string {
	return LoadBalancerName(service)
}

// GetLoadBalancer reports the Service's LoadBalancer, or (nil, false, nil) when it has none,
// so that a Service whose LoadBalancer is gone can still be deleted.
func (l *loadBalancers) GetLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	lb, err := l.find(ctx, clusterName, service, true)
	var conflict *serviceError
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
	return loadBalancerStatus(lb), true, nil
}

// EnsureLoadBalancer creates or updates the Service's LoadBalancer and returns its addresses,
// or a RetryError while IronCore has not allocated them yet.
//
// It waits for nothing but, once per LoadBalancer and at most addressWait, its addresses. Its
// targets (the shared target labels, or its routing) are recorded and queued for package
// lbtargets, which writes them. An existing LoadBalancer already carries traffic, so when its
// NetworkInterface selector is to move (adoption of a reference CCM LoadBalancer, a change of
// --use-nic-selector), the selector moves only once every eligible target it routes to is
// selected by the new selector; until then it keeps its selector and the Service is retried.
// A LoadBalancerRouting never loses an eligible destination on the way.
func (l *loadBalancers) EnsureLoadBalancer(ctx context.Context, clusterName string, service *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	desired, err := desiredLoadBalancer(service, l.settings)
	if err != nil {
		return nil, l.report(service, err)
	}
	if len(service.Status.LoadBalancer.Ingress) == 0 {
		l.retries.begin(service.UID)
	}
	// A miss in the cache is not confirmed here: applying a LoadBalancer under the Service's
	// own name creates or updates it alike, so a GET per new Service would buy nothing.
	existing, err := l.find(ctx, clusterName, service, false)
	if err != nil {
		return nil, l.report(service, err)
	}
	var kept []serviceError
	if existing != nil {
		if ready, err := l.prepareUpdate(ctx, service, existing, desired); !ready || err != nil {
			return nil, err
		}
		desired.Name = existing.Name
		kept = keepAddresses(service, existing, desired)
	}
	l.warnOnce(service, append(ignoredFields(service), kept...))

	// The targets are queued first: a selector that is to move waits for its labels.
	l.syncTargets(service, nodes)
	var lb *networkingv1alpha1.LoadBalancer
	waitingForTargets := false
	if existing == nil {
		if lb, err = l.apply(ctx, service, desired); err != nil {
			return nil, err
		}
	} else {
		if waitingForTargets, err = l.holdSelector(ctx, existing, desired, nodes); err != nil {
			return nil, err
		}
		lb = existing
		if needsApply(existing, desired) {
			if lb, err = l.apply(ctx, service, desired); err != nil {
				return nil, err
			}
			if desired.Spec.NetworkInterfaceSelector == nil && existing.Spec.NetworkInterfaceSelector != nil {
				// IronCore may have rewritten the routing until the selector was gone, and a
				// rewrite it began before may still land: the routing is compared with
				// IronCore's (the LoadBalancer's change queues it) and checked again soon.
				l.targets.ForgetRouting(lb.UID)
				l.recheckSoon(service)
			}
		}
	}

	if waitingForTargets {
		return nil, l.retry(service, "keeping the NetworkInterface selector of LoadBalancer %s until its targets carry the label %s", lb.Name, keys.LabelLoadBalancerTarget)
	}
	if !allocated(lb, desired) {
		ready, err := l.waitForAddresses(ctx, service, lb, desired)
		if err != nil {
			return nil, err
		}
		if ready == nil {
			// The repair controller writes the rest into the Service's status on arrival;
			// meanwhile the Service shows what IronCore has allocated, if anything.
			klog.V(2).InfoS("IronCore has not yet allocated the LoadBalancer's addresses; they are reported on arrival", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb))
			return loadBalancerStatus(lb), nil
		}
		lb = ready
	}
	if took, ok := l.retries.forget(service.UID); ok {
		metrics.LoadBalancerProvisioning.WithLabelValues(strings.ToLower(string(lb.Spec.Type))).Observe(took.Seconds())
	}
	return loadBalancerStatus(lb), nil
}

// waitForAddresses returns lb once IronCore has allocated its addresses. IronCore usually
// allocates within a second; waiting that long on the cache's watch, once per LoadBalancer,
// spares the Service a retry, which the service controller reports as a Warning. Beyond, it
// returns nil if a controller reports the addresses on arrival, and a RetryError otherwise.
func (l *loadBalancers) waitForAddresses(ctx context.Context, service *corev1.Service, lb, desired *networkingv1alpha1.LoadBalancer) (*networkingv1alpha1.LoadBalancer, error) {
	if l.retries.firstWait(service.UID, lb.UID) {
		uid := lb.UID
		ready, err := l.ironcore.WaitForLoadBalancer(ctx, lb.Name, addressWait, func(seen *networkingv1alpha1.LoadBalancer) bool {
			return seen.UID == uid && allocated(seen, desired)
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
	klog.V(2).InfoS("Applied IronCore LoadBalancer", "service", klog.KObj(service), "loadBalancer", klog.KObj(lb), "type", lb.Spec.Type)
	return lb, nil
}

// syncTargets queues the Service's targets: the shared target labels if its LoadBalancer
// selects them, its LoadBalancerRouting otherwise (package lbtargets writes both), and reports
// what their latest sync found. A selector moves only once holdSelector finds the labels in
// place.
func (l *loadBalancers) syncTargets(service *corev1.Service, nodes []*corev1.Node) lbtargets.Report {
	var report lbtargets.Report
	if usesSelector(service, l.settings) {
		report = l.targets.RequestLabels(nodes)
	} else {
		report = l.targets.RequestRouting(service, nodes)
	}
	l.reportTargets(service, report)
	return report
}

// recheckSoon has the Service's targets synced again shortly, if a controller offers to.
func (l *loadBalancers) recheckSoon(service *corev1.Service) {
	if recheck := l.recheck.Load(); recheck != nil {
		(*recheck)(service)
	}
}

// holdSelector keeps the existing LoadBalancer's NetworkInterface selector in desired while
// the new selector would drop a destination of its routing whose Node is eligible, and
// reports whether it did. The labels were just written, but IronCore (and this cache) see
// them a moment later; the Service is retried until they do.
func (l *loadBalancers) holdSelector(ctx context.Context, existing, desired *networkingv1alpha1.LoadBalancer, nodes []*corev1.Node) (bool, error) {
	next := desired.Spec.NetworkInterfaceSelector
	if next == nil || equality.Semantic.DeepEqual(existing.Spec.NetworkInterfaceSelector, next) {
		return false, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(next)
	if err != nil {
		return false, err
	}
	routing, err := l.ironcore.LoadBalancerRouting(ctx, existing.Name)
	if errors.Is(err, ironcore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	eligible, err := l.targets.EligibleNetworkInterfaces(ctx, nodes)
	if err != nil {
		return false, err
	}
	for _, destination := range routing.Destinations {
		if destination.TargetRef == nil || !eligible[destination.TargetRef.Name] {
			continue
		}
		// The cache, not this process's own writes, decides: IronCore selects by what it sees.
		nic, err := l.ironcore.NetworkInterface(ctx, destination.TargetRef.Name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if !selector.Matches(labels.Set(nic.Labels)) {
			klog.V(2).InfoS("Keeping the NetworkInterface selector of a LoadBalancer until its targets are labelled",
				"loadBalancer", klog.KObj(existing), "networkInterface", klog.KObj(nic))
			desired.Spec.NetworkInterfaceSelector = existing.Spec.NetworkInterfaceSelector.DeepCopy()
			return true, nil
		}
	}
	return false, nil
}

// prepareUpdate checks that an existing LoadBalancer can be updated to the desired one. A type
// switch replaces it: the old one is deleted here and the new one created on a later call,
// once the old one is gone. ready is false while that takes.
func (l *loadBalancers) prepareUpdate(ctx context.Context, service *corev1.Service, existing, desired *networkingv1alpha1.LoadBalancer) (bool, error) {
	if existing.DeletionTimestamp != nil {
		return false, l.retry(service, "the previous IronCore LoadBalancer %s is still being deleted", existing.Name)
	}
	if existing.Spec.NetworkRef.Name != desired.Spec.NetworkRef.Name {
		return false, l.report(service, &serviceError{reason: ReasonNetworkChanged, message: fmt.Sprintf(
			"IronCore LoadBalancer %s is on Network %s, not %s as the cloud-config says; a LoadBalancer cannot move, so it is left as it is",
			existing.Name, existing.Spec.NetworkRef.Name, desired.Spec.NetworkRef.Name)})
	}
	if existing.Spec.Type == desired.Spec.Type {
		return true, nil
	}
	l.recorder.Eventf(service, corev1.EventTypeNormal, ReasonTypeChanged,
		"Replacing %s IronCore LoadBalancer %s with an %s one; the Service gets new addresses", existing.Spec.Type, existing.Name, desired.Spec.Type)
	if err := l.delete(ctx, existing); err != nil {
		return false, err
	}
	return false, l.retry(service, "replacing IronCore LoadBalancer %s of type %s with type %s", existing.Name, existing.Spec.Type, desired.Spec.Type)
}

// UpdateLoadBalancer records the Nodes as the Service's targets and queues their writes (the
// target labels, or its routing), without waiting for them; no Nodes means no targets. Nodes
// that the latest sync could not make targets are named in the returned error, so that the
// framework retries them.
func (l *loadBalancers) UpdateLoadBalancer(_ context.Context, _ string, service *corev1.Service, nodes []*corev1.Node) error {
	return l.syncTargets(service, nodes).Skipped.Err()
}

// AllocatedStatus returns the status of the Service's LoadBalancer once IronCore has allocated
// every address it should have. Before that, it returns nil and whether the LoadBalancer is
// waiting for IronCore, rather than for the Service (an invalid spec) or for this CCM (one of
// the other type or being deleted, to be replaced; none yet; someone else's). It never
// writes: a caller that reports addresses must not create a LoadBalancer for a Service that is
// going away.
func (l *loadBalancers) AllocatedStatus(ctx context.Context, clusterName string, service *corev1.Service) (status *corev1.LoadBalancerStatus, pending bool, err error) {
	desired, err := desiredLoadBalancer(service, l.settings)
	if err != nil {
		return nil, false, nil //nolint:nilerr // the Service's syncs report its errors
	}
	lb, err := l.find(ctx, clusterName, service, false)
	var conflict *serviceError
	switch {
	case errors.As(err, &conflict):
		return nil, false, nil
	case err != nil || lb == nil:
		return nil, false, err
	case lb.DeletionTimestamp != nil || lb.Spec.Type != desired.Spec.Type:
		return nil, false, nil
	case !allocated(lb, desired):
		return nil, true, nil
	}
	if took, ok := l.retries.forget(service.UID); ok {
		metrics.LoadBalancerProvisioning.WithLabelValues(strings.ToLower(string(lb.Spec.Type))).Observe(took.Seconds())
	}
	return loadBalancerStatus(lb), false, nil
}

// EnsureLoadBalancerDeleted deletes the Service's LoadBalancer if this cluster owns one, and
// returns without waiting for IronCore to finish. Deleting what is gone is not an error.
func (l *loadBalancers) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *corev1.Service) error {
	_, _ = l.retries.forget(service.UID)
	l.notices.forget(service.UID)
	metrics.LoadBalancerTargets.DeleteLabelValues(service.Namespace, service.Name)
	lb, err := l.find(ctx, clusterName, service, true)
	var conflict *serviceError
	switch {
	case errors.As(err, &conflict):
		l.warn(service, conflict)
		return nil
	case err != nil:
		return err
	case lb == nil || lb.DeletionTimestamp != nil:
		return nil
	}
	return l.delete(ctx, lb)
}

// delete deletes a LoadBalancer of ours and the LoadBalancerRouting this CCM wrote for it.
// IronCore's garbage collector would remove the routing too, but not if it is not running.
func (l *loadBalancers) delete(ctx context.Context, lb *networkingv1alpha1.LoadBalancer) error {
	l.targets.ForgetRouting(lb.UID)
	routing, err := l.ironcore.LoadBalancerRouting(ctx, lb.Name)
	switch {
	case err == nil && ownedBy(routing, lb):
		if err := l.ironcore.DeleteLoadBalancerRouting(ctx, routing); err != nil {
			return err
		}
	case err != nil && !errors.Is(err, ironcore.ErrNotFound):
		return err
	}
	if err := l.ironcore.DeleteLoadBalancer(ctx, lb); err != nil {
		return err
	}
	klog.V(2).InfoS("Deleted IronCore LoadBalancer", "loadBalancer", klog.KObj(lb), "service", klog.KRef(ironcore.OwnerOf(lb).Namespace, ironcore.OwnerOf(lb).Name))
	return nil
}

func ownedBy(obj metav1.Object, owner *networkingv1alpha1.LoadBalancer) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == owner.UID {
			return true
		}
	}
	return false
}

// find returns the Service's LoadBalancer, or nil if it has none. It looks for LoadBalancers
// recording the Service's UID, then at the names this and the reference CCM give them, in the
// cache and, with confirmMiss, if the cache knows none, at the API server, so that a
// LoadBalancer created a moment ago is not mistaken for a missing one (which would let a
// Service go without deleting it). A LoadBalancer under one of those names that belongs to
// another cluster or Service is an ownership conflict.
func (l *loadBalancers) find(ctx context.Context, clusterName string, service *corev1.Service, confirmMiss bool) (*networkingv1alpha1.LoadBalancer, error) {
	// The cluster's names: the configured one, the --cluster-name the service controller passes
	// (which the reference CCM recorded), and the earlier names of clusterNameAliases.
	owners := append([]string{l.settings.cluster, clusterName}, l.settings.aliases...)
	candidates, err := l.ironcore.LoadBalancersOfService(ctx, service.UID)
	if err != nil {
		return nil, err
	}
	for i := range candidates {
		if l.owns(&candidates[i], owners, service) {
			return &candidates[i], nil
		}
	}
	// The names this and the reference CCM give a Service's LoadBalancer, under each of the
	// cluster's names, each once.
	names := []string{LoadBalancerName(service)}
	for _, owner := range owners {
		legacy := legacyLoadBalancerName(owner, service)
		seen := false
		for _, name := range names {
			seen = seen || name == legacy
		}
		if owner != "" && !seen {
			names = append(names, legacy)
		}
	}
	for _, name := range names {
		lb, err := l.ironcore.LoadBalancer(ctx, name)
		if errors.Is(err, ironcore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return l.ownedOrConflict(lb, owners, service)
	}
	if !confirmMiss {
		return nil, nil
	}
	lb, err := l.ironcore.LiveLoadBalancer(ctx, names[0])
	if errors.Is(err, ironcore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return l.ownedOrConflict(lb, owners, service)
}

// findOwn is find from the cache, for the target reconcilers: a LoadBalancer of someone else
// under the Service's name is none of theirs (the Service's sync reports the conflict).
func (l *loadBalancers) findOwn(ctx context.Context, clusterName string, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	lb, err := l.find(ctx, clusterName, service, false)
	var conflict *serviceError
	if errors.As(err, &conflict) {
		return nil, nil
	}
	return lb, err
}

func (l *loadBalancers) ownedOrConflict(lb *networkingv1alpha1.LoadBalancer, owners []string, service *corev1.Service) (*networkingv1alpha1.LoadBalancer, error) {
	if l.owns(lb, owners, service) {
		return lb, nil
	}
	owner := ironcore.OwnerOf(lb)
	hint := ""
	if id, known := l.settings.clusterID.Known(); known && lb.Labels[keys.LabelClusterID] != "" && lb.Labels[keys.LabelClusterID] != id {
		hint = fmt.Sprintf(" (the CCM of the cluster with identity %s manages it)", lb.Labels[keys.LabelClusterID])
	} else if owner.UID == string(service.UID) && owner.Cluster != "" {
		hint = fmt.Sprintf(" (if %q is an earlier name of this cluster, add it to the cloud-config's clusterNameAliases)", owner.Cluster)
	}
	return nil, &serviceError{reason: ReasonOwnershipConflict, message: fmt.Sprintf(
		"IronCore LoadBalancer %s/%s belongs to Service %s/%s (UID %q) of cluster %q%s, not to this Service of cluster %q; it is left alone",
		lb.Namespace, lb.Name, owner.Namespace, owner.Name, owner.UID, owner.Cluster, hint, l.settings.cluster)}
}

// owns reports whether lb was made for this Service (by UID, which a re-created Service does
// not share) of this cluster. The cluster may be recorded as the configured name, one of its
// aliases or, by the reference CCM, as the --cluster-name it was given; an adopted
// LoadBalancer records the configured name from its next apply on. A LoadBalancer marked with
// another cluster's identity is never this cluster's: only a CCM writes that mark, so another
// CCM manages it, and taking it over would make the two fight over it.
func (l *loadBalancers) owns(lb *networkingv1alpha1.LoadBalancer, clusters []string, service *corev1.Service) bool {
	owner := ironcore.OwnerOf(lb)
	if owner.UID != string(service.UID) {
		return false
	}
	if mark, marked := lb.Labels[keys.LabelClusterID]; marked {
		if id, known := l.settings.clusterID.Known(); known && mark != id {
			return false
		}
	}
	for _, cluster := range clusters {
		if cluster != "" && owner.Cluster == cluster {
			return true
		}
	}
	return false
}

// ForgetRouting drops the record of the routing of the Service's LoadBalancer, so that its
// next sync compares with IronCore's.
func (l *loadBalancers) ForgetRouting(ctx context.Context, clusterName string, service *corev1.Service) {
	if lb, err := l.find(ctx, clusterName, service, false); err == nil && lb != nil {
		l.targets.ForgetRouting(lb.UID)
	}
}

// loadBalancerStatus turns the LoadBalancer's addresses into ingress points. Their ipMode is
// VIP: IronCore LoadBalancers forward packets with the load balancer address as destination,
// so kube-proxy on the Node must handle that address, and in-cluster clients may be sent
// straight to the Service (KEP-1860).
func loadBalancerStatus(lb *networkingv1alpha1.LoadBalancer) *corev1.LoadBalancerStatus {
	status := &corev1.LoadBalancerStatus{}
	for _, ip := range lb.Status.IPs {
		status.Ingress = append(status.Ingress, corev1.LoadBalancerIngress{IP: ip.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
	}
	return status
}

// allocated reports whether IronCore has given the LoadBalancer an address of every family,
// including every requested one.
func allocated(lb, desired *networkingv1alpha1.LoadBalancer) bool {
	have := map[corev1.IPFamily]bool{}
	addresses := map[string]bool{}
	for _, ip := range lb.Status.IPs {
		have[ip.Family()] = true
		addresses[ip.String()] = true
	}
	for _, family := range desired.Spec.IPFamilies {
		if !have[family] {
			return false
		}
	}
	for _, source := range desired.Spec.IPs {
		if source.Value != nil && !addresses[source.Value.String()] {
			return false
		}
	}
	return true
}

// report records a serviceError as a Warning event on the Service; every error is returned.
func (l *loadBalancers) report(service *corev1.Service, err error) error {
	var serviceErr *serviceError
	if errors.As(err, &serviceErr) {
		l.warn(service, serviceErr)
	}
	return err
}

func (l *loadBalancers) warn(service *corev1.Service, err *serviceError) {
	l.recorder.Event(service, corev1.EventTypeWarning, err.reason, err.message)
}

// reportTargets records what a target sync found: a Warning naming the Nodes that could not
// be made targets, a Warning when the health rule failed open, an event when a Local Service
// has no serving endpoint, each when it changes; and the number of target Nodes.
func (l *loadBalancers) reportTargets(service *corev1.Service, report lbtargets.Report) {
	var message string
	if len(report.Skipped) > 0 {
		message = report.Skipped.Err().Error()
	}
	if l.notices.changed(service.UID, ReasonTargetsIncomplete, message) && message != "" {
		l.recorder.Event(service, corev1.EventTypeWarning, ReasonTargetsIncomplete, message)
	}
	choice := report.Choice
	message = ""
	if choice.FailedOpen {
		message = fmt.Sprintf("Every Node that could serve the Service is unhealthy, so all %d stay load balancer targets: %s",
			len(choice.Targets), describeUnhealthy(choice.Unhealthy))
	}
	if l.notices.changed(service.UID, ReasonTargetsFailedOpen, message) && message != "" {
		l.recorder.Event(service, corev1.EventTypeWarning, ReasonTargetsFailedOpen, message)
	}
	message = ""
	if choice.NoLocalEndpoints && targetrules.Local(service) {
		message = fmt.Sprintf("The Service has externalTrafficPolicy Local and no serving endpoint on a target Node; its load balancer sends "+
			"traffic to all %d healthy Nodes, where kube-proxy refuses it, until an endpoint serves", len(choice.Targets))
	}
	if l.notices.changed(service.UID, ReasonNoLocalEndpoints, message) && message != "" {
		l.recorder.Event(service, corev1.EventTypeNormal, ReasonNoLocalEndpoints, message)
	}
	metrics.LoadBalancerTargets.WithLabelValues(service.Namespace, service.Name).Set(float64(len(choice.Targets)))
}

// describeUnhealthy names the unhealthy Nodes and why, the first few of them.
func describeUnhealthy(unhealthy map[string]targetrules.Verdict) string {
	names := slices.Sorted(maps.Keys(unhealthy))
	const shown = 5
	var parts []string
	for i, name := range names {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-shown))
			break
		}
		parts = append(parts, fmt.Sprintf("Node %s: %s", name, unhealthy[name].Reason))
	}
	return strings.Join(parts, "; ")
}

// usesSelector reports whether the Service's LoadBalancer selects its targets by label. A Local
// Service's targets are its own, so it always has a routing written by the CCM.
func usesSelector(service *corev1.Service, settings loadBalancerSettings) bool {
	return settings.useNICSelector && !targetrules.Local(service)
}

// warnOnce records the events about what the Service asks for and does not get, each time
// that changes, not on every sync: the service controller retries a Service often while
// IronCore works, and the same Warning every few hundred milliseconds buries the others.
func (l *loadBalancers) warnOnce(service *corev1.Service, warnings []serviceError) {
	messages := make([]string, 0, len(warnings))
	for _, warning := range warnings {
		messages = append(messages, warning.reason+": "+warning.message)
	}
	if !l.notices.changed(service.UID, "fields", strings.Join(messages, "\n")) {
		return
	}
	for _, warning := range warnings {
		l.recorder.Event(service, corev1.EventTypeWarning, warning.reason, warning.message)
	}
}

// notices remembers, per Service and kind, the last events recorded, so that an event is
// recorded again only when its content changes. A restart records them once more.
type notices struct {
	mu   sync.Mutex
	last map[types.UID]map[string]string
}

// changed records content as the Service's latest of kind and reports whether it differs
// from the one before. Empty content clears it.
func (n *notices) changed(uid types.UID, kind, content string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	previous := n.last[uid][kind]
	if previous == content {
		return false
	}
	if n.last == nil {
		n.last = map[types.UID]map[string]string{}
	}
	if n.last[uid] == nil {
		n.last[uid] = map[string]string{}
	}
	if content == "" {
		delete(n.last[uid], kind)
	} else {
		n.last[uid][kind] = content
	}
	return true
}

func (n *notices) forget(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.last, uid)
}
