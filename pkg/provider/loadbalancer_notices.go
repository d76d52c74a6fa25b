package provider

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/cloud-provider/api"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// retryDelays remembers, per Service, its retry delay (the client-go rate limiter's: it starts
// short, for a fast IronCore, and doubles up to a limit, for a slow one), which LoadBalancer
// EnsureLoadBalancer last waited for, and when this process began provisioning it.
type retryDelays struct {
	backoff workqueue.TypedRateLimiter[types.UID]
	mu      sync.Mutex
	waited  map[types.UID]types.UID
	started map[types.UID]time.Time
}

func newRetryDelays() *retryDelays {
	return &retryDelays{
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](firstRetryDelay, maxRetryDelay),
		waited:  map[types.UID]types.UID{},
		started: map[types.UID]time.Time{},
	}
}

// firstWait reports whether EnsureLoadBalancer has not yet waited for the addresses of the
// Service's LoadBalancer lb, and records that it does now.
func (r *retryDelays) firstWait(uid, lb types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waited[uid] == lb {
		return false
	}
	r.waited[uid] = lb
	return true
}

// begin records when provisioning of the Service's LoadBalancer began, unless it already did.
func (r *retryDelays) begin(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.started[uid]; !ok {
		r.started[uid] = time.Now()
	}
}

// forget resets the Service's delay, once it needs no more retries, and returns how long
// provisioning took if it had begun.
func (r *retryDelays) forget(uid types.UID) (time.Duration, bool) {
	r.backoff.Forget(uid)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waited, uid)
	started, ok := r.started[uid]
	delete(r.started, uid)
	return time.Since(started), ok
}

func (l *loadBalancers) retry(service *corev1.Service, format string, args ...any) error {
	delay := l.retries.backoff.When(service.UID)
	return api.NewRetryError(fmt.Sprintf(format, args...)+fmt.Sprintf("; checking again in %s", delay), delay)
}

// report records an lbspec.Problem as a Warning event on the Service; every error is returned.
func (l *loadBalancers) report(service *corev1.Service, err error) error {
	var problem *lbspec.Problem
	if errors.As(err, &problem) {
		l.warn(service, problem)
	}
	return err
}

// warn is the one place Problems become events: package docgen follows the reason from here
// to every lbspec.Problem literal to check that each is documented.
func (l *loadBalancers) warn(service *corev1.Service, problem *lbspec.Problem) {
	l.recorder.Event(service, corev1.EventTypeWarning, problem.Reason, problem.Message)
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

// warnOnce records the events about what the Service asks for and does not get, each time
// that changes, not on every sync: the service controller retries a Service often while
// IronCore works, and the same Warning every few hundred milliseconds buries the others.
func (l *loadBalancers) warnOnce(service *corev1.Service, warnings []lbspec.Problem) {
	messages := make([]string, 0, len(warnings))
	for _, warning := range warnings {
		messages = append(messages, warning.Reason+": "+warning.Message)
	}
	if !l.notices.changed(service.UID, "fields", strings.Join(messages, "\n")) {
		return
	}
	for i := range warnings {
		l.warn(service, &warnings[i])
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
