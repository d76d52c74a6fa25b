package ccmdefaults

import (
	"testing"
	"time"

	cpconfig "k8s.io/cloud-provider/config"
	"k8s.io/cloud-provider/options"
)

func TestApply(t *testing.T) {
	o, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	Apply(o)
	if o.KubeCloudShared.CloudProvider.Name != "ironcore" ||
		o.ServiceController.ConcurrentServiceSyncs != 100 ||
		o.NodeController.ConcurrentNodeSyncs != 50 ||
		o.KubeCloudShared.RouteReconciliationPeriod.Duration != 2*time.Second {
		t.Fatalf("Apply left %+v %+v %+v %+v", o.KubeCloudShared.CloudProvider, o.ServiceController, o.NodeController, o.KubeCloudShared.RouteReconciliationPeriod)
	}
}

// TestDefaultsFindsEveryChangeWithItsReason also checks that every changed default has a reason
// and every reason a changed default: Defaults fails otherwise.
func TestDefaultsFindsEveryChangeWithItsReason(t *testing.T) {
	defaults, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	want := []Default{
		{Flag: "cloud-provider", Upstream: "", Ours: "ironcore"},
		{Flag: "concurrent-node-syncs", Upstream: "1", Ours: "50"},
		{Flag: "concurrent-service-syncs", Upstream: "1", Ours: "100"},
		{Flag: "kube-api-burst", Upstream: "30", Ours: "400"},
		{Flag: "kube-api-qps", Upstream: "20", Ours: "200"},
		{Flag: "route-reconciliation-period", Upstream: "10s", Ours: "2s"},
	}
	if len(defaults) != len(want) {
		t.Fatalf("got %+v, want %+v", defaults, want)
	}
	for i, got := range defaults {
		if got.Flag != want[i].Flag || got.Upstream != want[i].Upstream || got.Ours != want[i].Ours || got.Reason == "" {
			t.Errorf("default %d = %+v, want %+v with a reason", i, got, want[i])
		}
	}
}

func TestDisableRoutesWithoutClusterCIDR(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		configure            bool
		clusterCIDR          string
		wantDisabled, wantOn bool
	}{
		{name: "routes without CIDR are turned off", configure: true, wantDisabled: true},
		{name: "routes with CIDR stay on", configure: true, clusterCIDR: "10.244.0.0/16", wantOn: true},
		{name: "routes off stay off", clusterCIDR: "10.244.0.0/16"},
		{name: "routes off without CIDR stay off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := &cpconfig.KubeCloudSharedConfiguration{ConfigureCloudRoutes: tc.configure, ClusterCIDR: tc.clusterCIDR}
			if disabled := DisableRoutesWithoutClusterCIDR(shared); disabled != tc.wantDisabled {
				t.Errorf("disabled = %v, want %v", disabled, tc.wantDisabled)
			}
			if shared.ConfigureCloudRoutes != tc.wantOn {
				t.Errorf("ConfigureCloudRoutes = %v, want %v", shared.ConfigureCloudRoutes, tc.wantOn)
			}
		})
	}
}
