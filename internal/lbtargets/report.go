package lbtargets

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// report records what a target sync found: a Warning naming the Nodes that could not
// be made targets, a Warning when the health rule failed open, an event when a Local Service
// has no serving endpoint, each when it changes; and the number of target Nodes.
func (t *Controller) report(service *corev1.Service, report targetsapi.Report) {
	if !t.stillWanted(service) {
		// A sync or request that began before the Service stopped wanting a load balancer
		// records nothing: what was recorded of it is dropped, and would stay.
		return
	}
	var message string
	if len(report.Skipped) > 0 {
		message = report.Skipped.Err().Error()
	}
	if t.notices.Changed(service.UID, targetsapi.ReasonTargetsIncomplete, message) && message != "" && t.recorder != nil {
		t.recorder.Event(service, corev1.EventTypeWarning, targetsapi.ReasonTargetsIncomplete, message)
	}
	message = ""
	if report.FailedOpen != "" {
		message = fmt.Sprintf("Every Node that could serve the Service is unhealthy, so all %d stay load balancer targets: %s",
			report.Targets, report.FailedOpen)
	}
	if t.notices.Changed(service.UID, targetsapi.ReasonTargetsFailedOpen, message) && message != "" && t.recorder != nil {
		t.recorder.Event(service, corev1.EventTypeWarning, targetsapi.ReasonTargetsFailedOpen, message)
	}
	message = ""
	if report.NoLocalEndpoints && targetrules.Local(service) {
		message = fmt.Sprintf("The Service has externalTrafficPolicy Local and no serving endpoint on a target Node; its load balancer sends "+
			"traffic to all %d healthy Nodes, where kube-proxy refuses it, until an endpoint serves", report.Targets)
	}
	if t.notices.Changed(service.UID, targetsapi.ReasonNoLocalEndpoints, message) && message != "" && t.recorder != nil {
		t.recorder.Event(service, corev1.EventTypeNormal, targetsapi.ReasonNoLocalEndpoints, message)
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

// stillWanted tells whether the Service, as the lister shows it if it shows this one, wants a
// load balancer of this CCM.
func (t *Controller) stillWanted(service *corev1.Service) bool {
	if current, err := t.listers.services.Services(service.Namespace).Get(service.Name); err == nil && current.UID == service.UID {
		return t.class.Wants(current)
	}
	return t.class.Wants(service)
}
