package provider

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/cloud-provider/api"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// retryDelays remembers, per Service, its retry delay, which LoadBalancer EnsureLoadBalancer
// last waited for, and when provisioning began.
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

// warnOnce records an event only when it changes: the service controller retries often while
// IronCore works, and the same Warning every few hundred milliseconds buries the others.
func (l *loadBalancers) warnOnce(service *corev1.Service, warnings []lbspec.Problem) {
	messages := make([]string, 0, len(warnings))
	for _, warning := range warnings {
		messages = append(messages, warning.Reason+": "+warning.Message)
	}
	if !l.notices.Changed(service.UID, "fields", strings.Join(messages, "\n")) {
		return
	}
	for i := range warnings {
		l.warn(service, &warnings[i])
	}
}
