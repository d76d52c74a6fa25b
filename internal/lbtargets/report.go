package lbtargets

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Reasons of the events on Services about their targets.
const (
	ReasonTargetsIncomplete = "LoadBalancerTargetsIncomplete"
	ReasonTargetsFailedOpen = "LoadBalancerTargetsFailedOpen"
	ReasonNoLocalEndpoints  = "LoadBalancerNoLocalEndpoints"
)

// report records what a target sync found: a Warning naming the Nodes that could not
// be made targets, a Warning when the health rule failed open, an event when a Local Service
// has no serving endpoint, each when it changes; and the number of target Nodes.
func (t *Controller) report(service *corev1.Service, report Report) {
	var message string
	if len(report.Skipped) > 0 {
		message = report.Skipped.Err().Error()
	}
	if t.notices.Changed(service.UID, ReasonTargetsIncomplete, message) && message != "" && t.recorder != nil {
		t.recorder.Event(service, corev1.EventTypeWarning, ReasonTargetsIncomplete, message)
	}
	message = ""
	if report.FailedOpen != "" {
		message = fmt.Sprintf("Every Node that could serve the Service is unhealthy, so all %d stay load balancer targets: %s",
			report.Targets, report.FailedOpen)
	}
	if t.notices.Changed(service.UID, ReasonTargetsFailedOpen, message) && message != "" && t.recorder != nil {
		t.recorder.Event(service, corev1.EventTypeWarning, ReasonTargetsFailedOpen, message)
	}
	message = ""
	if report.NoLocalEndpoints && targetrules.Local(service) {
		message = fmt.Sprintf("The Service has externalTrafficPolicy Local and no serving endpoint on a target Node; its load balancer sends "+
			"traffic to all %d healthy Nodes, where kube-proxy refuses it, until an endpoint serves", report.Targets)
	}
	if t.notices.Changed(service.UID, ReasonNoLocalEndpoints, message) && message != "" && t.recorder != nil {
		t.recorder.Event(service, corev1.EventTypeNormal, ReasonNoLocalEndpoints, message)
	}
	metrics.LoadBalancerTargets.WithLabelValues(service.Namespace, service.Name).Set(float64(report.Targets))
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

// ForgetService forgets the events recorded on a Service that is gone.
func (t *Controller) ForgetService(service *corev1.Service) {
	t.notices.Forget(service.UID)
}

// Notices remembers, per Service and kind, the last events recorded, so that an event is
// recorded again only when its content changes. A restart records them once more.
type Notices struct {
	mu   sync.Mutex
	last map[types.UID]map[string]string
}

// Changed records content as the Service's latest of kind and reports whether it differs
// from the one before. Empty content clears it.
func (n *Notices) Changed(uid types.UID, kind, content string) bool {
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
		if len(n.last[uid]) == 0 {
			delete(n.last, uid)
		}
	} else {
		n.last[uid][kind] = content
	}
	return true
}

// Forget forgets the Service's events.
func (n *Notices) Forget(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.last, uid)
}
