// Package ccmdefaults holds the upstream cloud-controller-manager settings this CCM changes.
// main applies them; package docgen documents why, and finds every change by applying them, so
// the two cannot drift.
package ccmdefaults

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cpconfig "k8s.io/cloud-provider/config"
	"k8s.io/cloud-provider/options"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

const (
	concurrentServiceSyncs    = 100
	concurrentNodeSyncs       = 50
	routeReconciliationPeriod = 2 * time.Second
	kubeAPIQPS                = 200
	kubeAPIBurst              = 400
)

// Apply sets this CCM's defaults on the upstream options, before flags are parsed, so that a
// flag given on the command line still wins.
func Apply(o *options.CloudControllerManagerOptions) {
	o.KubeCloudShared.CloudProvider.Name = provider.ProviderName
	o.ServiceController.ConcurrentServiceSyncs = concurrentServiceSyncs
	o.NodeController.ConcurrentNodeSyncs = concurrentNodeSyncs
	o.KubeCloudShared.RouteReconciliationPeriod = metav1.Duration{Duration: routeReconciliationPeriod}
	o.Generic.ClientConnection.QPS = kubeAPIQPS
	o.Generic.ClientConnection.Burst = kubeAPIBurst
}

// DisableRoutesWithoutClusterCIDR turns routes off when they are configured but no cluster CIDR
// is given, and reports whether it did (see docgen.RoutesWithoutClusterCIDR).
func DisableRoutesWithoutClusterCIDR(shared *cpconfig.KubeCloudSharedConfiguration) bool {
	if !shared.ConfigureCloudRoutes || shared.ClusterCIDR != "" {
		return false
	}
	shared.ConfigureCloudRoutes = false
	return true
}
