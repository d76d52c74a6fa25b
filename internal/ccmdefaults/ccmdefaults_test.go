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
