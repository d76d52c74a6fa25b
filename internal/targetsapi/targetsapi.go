// Package targetsapi is the contract between the provider's load balancers and the load
// balancer targets controller (package lbtargets): what the load balancers ask of it, what a
// target sync reports back, and the events a report records on a Service. It is small on
// purpose: the provider builds on it without the controller.
package targetsapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Targets is the targets controller as the load balancers use it. They queue a Service's
// targets and ask what the targets will be; the controller, which cmd builds and runs, chooses
// them from its own Node lister (the Nodes the service controller passes are no newer), writes
// them, and follows the LoadBalancers' changes and deletions itself.
type Targets interface {
	// Request records the Service as the service controller passes it, queues the sync of its
	// targets (the shared target labels when its LoadBalancer selects them, its routing
	// otherwise) and returns what the latest one found.
	Request(service *corev1.Service, selecting bool) Report
	// Expects tells whether the Service's LoadBalancer should have somewhere to send traffic.
	Expects(ctx context.Context, service *corev1.Service) (bool, error)
	// HoldSelector keeps the existing selector in desired while the new one would drop a
	// destination, and says for how long more when it is only settling. It reads nothing:
	// the controller checks the move in its own workers.
	HoldSelector(existing, desired *networkingv1alpha1.LoadBalancer) (bool, time.Duration)
}

// Reasons of the events on Services about their targets.
const (
	ReasonTargetsIncomplete = "LoadBalancerTargetsIncomplete"
	ReasonTargetsFailedOpen = "LoadBalancerTargetsFailedOpen"
	ReasonNoLocalEndpoints  = "LoadBalancerNoLocalEndpoints"
)

// Report is what a target sync found: the Nodes that could not be made targets, and what the
// target rules made of the others. It is kept per Service until the next sync, so it holds
// what the events and the metric read, not the chosen Nodes: those are as many as the Nodes.
type Report struct {
	Skipped Skipped
	// Targets counts the Nodes the rules chose.
	Targets int
	// FailedOpen names the first few unhealthy Nodes, and why, when every Node that could serve
	// is unhealthy and they all stay targets; it is empty otherwise.
	FailedOpen string
	// NoLocalEndpoints is set when none of a Local Service's candidates has a serving endpoint.
	NoLocalEndpoints bool
}

// Skipped lists Nodes that could not be made targets, and why.
type Skipped []string

// Err names the skipped Nodes in an error that wraps targetrules.ErrNodesSkipped, or is nil.
func (s Skipped) Err() error {
	if len(s) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", targetrules.ErrNodesSkipped, strings.Join(s, "; "))
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

// Remembered counts the Services with events remembered.
func (n *Notices) Remembered() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.last)
}
