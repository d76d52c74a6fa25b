// Package metrics defines the CCM's own metrics, served with the upstream ones on the secure
// port's /metrics.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const namespace = "ironcore_ccm"

// OrphanedLoadBalancers counts IronCore LoadBalancers found orphaned past their grace period,
// by what was done: "deleted", "reported" or "failed".
var OrphanedLoadBalancers = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace:      namespace,
	Name:           "orphaned_load_balancers_total",
	Help:           "IronCore LoadBalancers of this cluster found without a Service past the grace period, by action taken.",
	StabilityLevel: metrics.ALPHA,
}, []string{"action"})

var registerOnce sync.Once

// Register adds the metrics to the registry /metrics serves. It may be called more than once.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(OrphanedLoadBalancers)
	})
}
