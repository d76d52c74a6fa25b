// Command ironcore-cloud-controller-manager is the Kubernetes cloud-controller-manager for
// IronCore: it initializes and removes Nodes from IronCore Machines.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric on /metrics
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ccmdefaults"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterlabel"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodelabels"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/orphans"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/podcidrs"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

const commandName = "ironcore-cloud-controller-manager"

func main() {
	os.Exit(run())
}

func run() int {
	// The IronCore cache logs through controller-runtime; send that to klog like everything else.
	ctrllog.SetLogger(klog.Background())

	ccmOptions, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", commandName, err)
		return 1
	}
	ccmdefaults.Apply(ccmOptions)

	ironcoreOptions := config.NewOptions()
	flagSets := cliflag.NamedFlagSets{}
	ironcoreOptions.AddFlags(flagSets.FlagSet("IronCore"))

	var command *cobra.Command
	// The targets controller is built with the provider, whose load balancers queue its work,
	// and started with the other controllers.
	var targets *lbtargets.Controller
	var podCIDRs *podcidrs.Allocator
	initCloud := func(completed *cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface {
		cloud, err := newCloud(completed, ironcoreOptions, command.Flags().Changed("cluster-name"))
		if err != nil {
			// The framework has no way to return this error; end here with one message.
			fmt.Fprintf(os.Stderr, "%s: %v\n", commandName, err)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		if podCIDRs, err = newPodCIDRAllocator(cloud); err == nil {
			targets, err = newTargets(cloud, completed)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", commandName, err)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		return cloud
	}
	initializers := controllerInitializers(func() *lbtargets.Controller { return targets }, func() *podcidrs.Allocator { return podCIDRs })
	command = app.NewCloudControllerManagerCommand(ccmOptions, initCloud, initializers, names.CCMControllerAliases(), flagSets, wait.NeverStop)
	command.Use = commandName
	withVersion(command)
	command.Long = `The IronCore cloud-controller-manager connects a Kubernetes cluster to the IronCore IaaS:
it initializes Nodes from their IronCore Machines (provider ID, instance type, zone, region,
addresses), marks Nodes whose Machine is shut down, deletes Nodes whose Machine is gone,
serves Services of type LoadBalancer with IronCore LoadBalancers, and routes pod CIDRs as
prefixes of the Nodes' IronCore NetworkInterfaces.`
	return cli.Run(command)
}

func newCloud(completed *cloudcontrollerconfig.CompletedConfig, ironcoreOptions *config.Options, clusterNameSet bool) (*provider.Cloud, error) {
	shared := &completed.ComponentConfig.KubeCloudShared
	if shared.CloudProvider.Name != provider.ProviderName {
		return nil, fmt.Errorf("--cloud-provider is %q; this binary only implements %q", shared.CloudProvider.Name, provider.ProviderName)
	}
	if ccmdefaults.DisableRoutesWithoutClusterCIDR(shared) {
		klog.InfoS("Not programming pod routes: --cluster-cidr is not set (set it to route pod CIDRs through IronCore, or --configure-cloud-routes=false)")
	}
	anonymous, err := reloadTargetCredentials(completed)
	if err != nil {
		return nil, err
	}
	fence, recorder, err := gateWrites(completed, anonymous, ironcoreOptions)
	if err != nil {
		return nil, err
	}
	return provider.New(context.Background(), provider.Settings{
		CloudConfigPath:    shared.CloudProvider.CloudConfigFile,
		ClusterNameFlag:    shared.ClusterName,
		ClusterNameFlagSet: clusterNameSet,
		Options:            ironcoreOptions,
		Recorder:           completed.EventRecorder,
		LeaseFence:         fence,
		DryRun:             recorder,
	})
}

// controllerInitializers are the framework's controllers plus ours.
func controllerInitializers(targets func() *lbtargets.Controller, podCIDRs func() *podcidrs.Allocator) map[string]app.ControllerInitFuncConstructor {
	initializers := make(map[string]app.ControllerInitFuncConstructor, len(app.DefaultInitFuncConstructors)+7)
	for name, constructor := range app.DefaultInitFuncConstructors {
		initializers[name] = constructor
	}
	// The framework's service and node controllers, started on this CCM's informers.
	for name, start := range map[string]app.InitFuncConstructor{
		names.ServiceLBController: startServiceController,
		names.CloudNodeController: startCloudNodeController,
	} {
		constructor := initializers[name]
		constructor.Constructor = start
		initializers[name] = constructor
	}
	// This CCM's own controllers, each with a client named after it.
	for name, start := range map[string]app.InitFuncConstructor{
		clusterlabel.Name: startClusterLabelController,
		lbrepair.Name:     startLoadBalancerRepair,
		lbtargets.Name:    startLoadBalancerTargets(targets),
		nodeipam.Name:     startNodeIPAM(podCIDRs),
		nodelabels.Name:   startNodeLabels,
		orphans.Name:      startOrphanCollector,
	} {
		initializers[name] = app.ControllerInitFuncConstructor{InitContext: app.ControllerInitContext{ClientName: name}, Constructor: start}
	}
	return initializers
}
