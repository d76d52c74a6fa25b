// Package metrics defines the CCM's own metrics, served with the upstream ones on the secure
// port's /metrics. docs/metrics.md describes them with example queries and alerts.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/version"
)

const namespace = "ironcore_ccm"

// The metrics live in component-base's process-wide registry, which is what the upstream
// controllers and the secure port's /metrics use.
var (
	// BuildInfo is 1, labelled with which build of the CCM runs (package version): a dashboard
	// or an alert tells the version of each replica, and when it changed.
	BuildInfo = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "build_info",
		Help:           "Always 1; its labels say which build of the CCM runs: version, commit, Go version, and the IronCore API and k8s.io/cloud-provider versions it was built with.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"version", "commit", "go_version", "ironcore_api", "cloud_provider"})

	// OrphanedLoadBalancers counts IronCore LoadBalancers found orphaned past their grace
	// period, by what was done: "deleted", "retained" (its Service asked to retain it), "reported",
	// "failed", or "refused" (not provably this cluster's).
	OrphanedLoadBalancers = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "orphaned_load_balancers_total",
		Help:           "IronCore LoadBalancers of this cluster found without a Service past the grace period, by action taken.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"action"})

	// RetainedLoadBalancers is how many IronCore LoadBalancers of this cluster are retained
	// after their Service, as the orphan collector's last sweep found them.
	RetainedLoadBalancers = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "retained_load_balancers",
		Help:           "IronCore LoadBalancers of this cluster retained after their Service (keeping their addresses), as of the last sweep.",
		StabilityLevel: metrics.ALPHA,
	})

	// RetainedLoadBalancersReleased counts retained LoadBalancers past
	// --retained-load-balancer-retention, by what was done: "deleted", "reported", "failed",
	// or "refused" (not provably this cluster's).
	RetainedLoadBalancersReleased = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "retained_load_balancers_released_total",
		Help:           "Retained IronCore LoadBalancers found past the retention period, by action taken (deleted, reported, failed, refused).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"action"})

	// IronCoreRequests counts the CCM's requests to the IronCore API by verb, resource and
	// result: the HTTP status code, or "error" when no response came.
	IronCoreRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "ironcore_api_requests_total",
		Help:           "Requests to the IronCore API, by verb, resource and result (HTTP status code, or error when there was no response).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"verb", "resource", "code"})

	// IronCoreRequestDuration is how long IronCore API requests took, watches excluded.
	IronCoreRequestDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "ironcore_api_request_duration_seconds",
		Help:           "Latency of requests to the IronCore API (watches excluded), by verb and resource.",
		Buckets:        []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		StabilityLevel: metrics.ALPHA,
	}, []string{"verb", "resource"})

	// LoadBalancerProvisioning is how long a Service waited for its IronCore LoadBalancer's
	// addresses, from this process's first attempt until the addresses were returned.
	LoadBalancerProvisioning = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "load_balancer_provisioning_duration_seconds",
		Help:           "Time from the first attempt to provision a Service's IronCore LoadBalancer until it had addresses, by type (public, internal).",
		Buckets:        []float64{0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300},
		StabilityLevel: metrics.ALPHA,
	}, []string{"type"})

	// LoadBalancerTargets is how many Nodes each Service's load balancer sends traffic to, as
	// the last sync of its targets chose them.
	LoadBalancerTargets = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "load_balancer_targets",
		Help:           "Nodes a Service's IronCore LoadBalancer sends traffic to, as last synced, by Service namespace and name.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "service"})

	// LoadBalancerRoutingSyncs counts the CCM's syncs of LoadBalancerRoutings by result:
	// "changed" (written) or "unchanged" (already as wanted, nothing written).
	LoadBalancerRoutingSyncs = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "load_balancer_routing_syncs_total",
		Help:           "Syncs of the LoadBalancerRoutings the CCM writes, by result (changed: written; unchanged: nothing to write).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// LoadBalancerTargetDriftRepaired counts load balancer targets found changed behind the
	// CCM's back and put back, by kind: "label" (a NetworkInterface's target label) or
	// "routing" (a LoadBalancerRouting the CCM writes).
	LoadBalancerTargetDriftRepaired = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "load_balancer_target_drift_repaired_total",
		Help:           "Load balancer targets changed outside the CCM and repaired, by kind (label: a NetworkInterface's target label; routing: a LoadBalancerRouting the CCM writes).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})

	// NodeHealthExclusions counts Nodes that stopped receiving load balancer traffic because
	// of the Node health rule, by why.
	NodeHealthExclusions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "load_balancer_node_health_exclusions_total",
		Help:           "Nodes taken out of load balancer targets by the Node health rule, by reason (deleting, autoscaler-deletion, shutdown-taint, machine-stopped, machine-state, not-ready).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	// UnhealthyNodes is how many Nodes the Node health rule finds unhealthy now.
	UnhealthyNodes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "load_balancer_unhealthy_nodes",
		Help:           "Nodes the Node health rule currently keeps out of load balancer targets (unless it fails open).",
		StabilityLevel: metrics.ALPHA,
	})

	// PodCIDRAllocations counts the node IPAM controller's outcomes per Node, by result:
	// "allocated" (spec.podCIDRs set from IronCore), "from-elsewhere" (the Node got pod CIDRs
	// from another allocator) or "failed" (a sync that failed and is retried).
	PodCIDRAllocations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "pod_cidr_allocations_total",
		Help:           "Pod CIDR allocations from IronCore's IPAM, by result (allocated, from-elsewhere, failed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// PodCIDRAllocationDuration is the time from a Node's creation to its pod CIDRs being set.
	PodCIDRAllocationDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "pod_cidr_allocation_duration_seconds",
		Help:           "Time from a Node's creation to spec.podCIDRs set from IronCore's IPAM.",
		Buckets:        []float64{0.25, 0.5, 1, 2, 5, 10, 30, 60, 300},
		StabilityLevel: metrics.ALPHA,
	})

	// PodCIDRsReleased counts pod CIDR entries removed from NetworkInterfaces, by why:
	// "node-gone" or "unused" (the Node has pod CIDRs from elsewhere).
	PodCIDRsReleased = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "pod_cidrs_released_total",
		Help:           "Pod CIDRs released to IronCore's IPAM, by reason (node-gone, unused).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	// PodCIDRsPending is how many Nodes wait for their pod CIDRs.
	PodCIDRsPending = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "pod_cidrs_pending_nodes",
		Help:           "Nodes waiting for IronCore to allocate their pod CIDRs.",
		StabilityLevel: metrics.ALPHA,
	})

	// RouteOperations counts route changes on NetworkInterfaces by operation (create,
	// delete) and result (changed, unchanged, error).
	RouteOperations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "route_operations_total",
		Help:           "Route operations on IronCore NetworkInterfaces, by operation (create, delete) and result (changed, unchanged, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation", "result"})

	// KubeconfigReloads counts kubeconfigs read again after they changed or a request was
	// refused as unauthenticated, by kubeconfig ("ironcore", "target") and result: "reloaded"
	// (requests use its credentials now) or "failed" (unreadable, invalid or refused; the
	// credentials before stay in use).
	KubeconfigReloads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "kubeconfig_reloads_total",
		Help:           "Changed kubeconfigs read again without a restart, by kubeconfig (ironcore, target) and result (reloaded, failed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kubeconfig", "result"})

	// DryRunChanges counts, with --dry-run, the distinct changes the CCM would have made, by
	// API ("ironcore", "cluster"), verb and resource: a change retried is counted once. An
	// alert on verb="delete" says a switch would delete something.
	DryRunChanges = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "dry_run_changes_total",
		Help:           "With --dry-run, the distinct writes the CCM would have made (each change once, however often retried), by API (ironcore, cluster), verb and resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"api", "verb", "resource"})

	// DryRunWriteAttempts counts, with --dry-run, every write refused, retries included.
	DryRunWriteAttempts = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "dry_run_write_attempts_total",
		Help:           "With --dry-run, every write refused and recorded, retries included, by API, verb and resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"api", "verb", "resource"})
)

var registerOnce sync.Once

// Register adds the metrics to the registry /metrics serves. It may be called more than once.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(BuildInfo, OrphanedLoadBalancers, RetainedLoadBalancers, RetainedLoadBalancersReleased, IronCoreRequests, IronCoreRequestDuration, LoadBalancerProvisioning, RouteOperations,
			LoadBalancerTargets, LoadBalancerRoutingSyncs, LoadBalancerTargetDriftRepaired, NodeHealthExclusions, UnhealthyNodes,
			PodCIDRAllocations, PodCIDRAllocationDuration, PodCIDRsReleased, PodCIDRsPending, KubeconfigReloads,
			DryRunChanges, DryRunWriteAttempts)
		build := version.Get()
		BuildInfo.WithLabelValues(build.Version, build.Commit, build.GoVersion, build.IronCoreAPI, build.CloudProvider).Set(1)
	})
}
