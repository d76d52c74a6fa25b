// Command ironcore-cloud-controller-manager is the Kubernetes cloud-controller-manager for
// IronCore: it initializes and removes Nodes from IronCore Machines.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric on /metrics
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ccmdefaults"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterlabel"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/leasefence"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodesync"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/orphans"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
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
	initCloud := func(completed *cloudcontrollerconfig.CompletedConfig) cloudprovider.Interface {
		cloud, err := newCloud(completed, ironcoreOptions, command.Flags().Changed("cluster-name"))
		if err != nil {
			// The framework has no way to return this error; end here with one message.
			fmt.Fprintf(os.Stderr, "%s: %v\n", commandName, err)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
		return cloud
	}
	command = app.NewCloudControllerManagerCommand(ccmOptions, initCloud, controllerInitializers(), names.CCMControllerAliases(), flagSets, wait.NeverStop)
	command.Use = commandName
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
	fence, err := leaseFence(completed)
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
	})
}

// leaseFence returns, with leader election on, the fence that keeps this replica from writing
// to IronCore and to the cluster unless it renewed its leader lease within the renew deadline.
// It watches the leader election's writes of the lease through the configuration the framework
// builds the leader election's client from, which the framework does only after this runs, as
// it does the controllers' clients, whose writes the fence gates there.
func leaseFence(completed *cloudcontrollerconfig.CompletedConfig) (*leasefence.Fence, error) {
	election := completed.ComponentConfig.Generic.LeaderElection
	if !election.LeaderElect {
		return nil, nil
	}
	if _, err := leasefence.CheckWindow(election.RenewDeadline.Duration, election.LeaseDuration.Duration, election.RetryPeriod.Duration); err != nil {
		return nil, err
	}
	fence := leasefence.New(election.ResourceNamespace, election.ResourceName, election.RenewDeadline.Duration, election.LeaseDuration.Duration)
	gate := writegate.New(leasefence.Unfenced)
	gate.SetFence(fence)
	// The gate goes first, onto the base transport, whose connections it fences.
	completed.Kubeconfig.Wrap(gate.Wrap)
	completed.Kubeconfig.Wrap(fence.Wrap)

	// The framework built two clients before: the one events are sent with, and the one that
	// gets the tokens of controllers acting as their own service accounts. Their successors
	// write through the gate.
	client, err := kubernetes.NewForConfig(restclient.AddUserAgent(completed.Kubeconfig, options.CloudControllerManagerUserAgent))
	if err != nil {
		return nil, fmt.Errorf("build the cluster client: %w", err)
	}
	completed.Client = client
	if completed.ComponentConfig.KubeCloudShared.UseServiceAccountCredentials {
		anonymous := restclient.AnonymousClientConfig(completed.Kubeconfig)
		anonymous.Wrap(gate.Wrap)
		completed.ClientBuilder = clientbuilder.NewDynamicClientBuilder(anonymous, client.CoreV1(), metav1.NamespaceSystem)
	}
	return fence, nil
}

// controllerInitializers are the framework's controllers plus ours.
func controllerInitializers() map[string]app.ControllerInitFuncConstructor {
	initializers := make(map[string]app.ControllerInitFuncConstructor, len(app.DefaultInitFuncConstructors)+4)
	for name, constructor := range app.DefaultInitFuncConstructors {
		initializers[name] = constructor
	}
	service := initializers[names.ServiceLBController]
	service.Constructor = startServiceController
	initializers[names.ServiceLBController] = service
	initializers[clusterlabel.Name] = app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: clusterlabel.Name},
		Constructor: startClusterLabelController,
	}
	initializers[lbrepair.Name] = app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: lbrepair.Name},
		Constructor: startLoadBalancerRepair,
	}
	initializers[lbtargets.Name] = app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: lbtargets.Name},
		Constructor: startLoadBalancerTargets,
	}
	initializers[nodeipam.Name] = app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: nodeipam.Name},
		Constructor: startNodeIPAM,
	}
	initializers[orphans.Name] = app.ControllerInitFuncConstructor{
		InitContext: app.ControllerInitContext{ClientName: orphans.Name},
		Constructor: startOrphanCollector,
	}
	return initializers
}

// startServiceController starts the upstream service controller as the framework would, but
//   - on a Node informer that gives every Node event one key (package nodesync): a burst of
//     Nodes then costs a few syncs of every Service's Node list rather than one per Node;
//   - on a Service informer of its own that shows it the Services of this CCM's load balancer
//     class as class-less, which is all it serves, and hides the class-less ones when
//     --default-load-balancer is false (package lbclass).
func startServiceController(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, controllerContext genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		client, err := completed.ClientBuilder.Client(initContext.ClientName)
		if err != nil {
			return nil, false, err
		}
		class := lbclass.Policy{}
		if ironcoreCloud, ok := cloud.(*provider.Cloud); ok {
			class = ironcoreCloud.LoadBalancerClass()
		}
		services := class.ServiceInformers(client, completed.ComponentConfig.Generic.MinResyncPeriod.Duration)
		c, err := servicecontroller.New(cloud, client, services.Core().V1().Services(),
			nodesync.Coalesced(completed.SharedInformers.Core().V1().Nodes()),
			completed.ComponentConfig.KubeCloudShared.ClusterName, utilfeature.DefaultFeatureGate)
		if err != nil {
			// As the framework does: the CCM runs on without load balancers.
			klog.ErrorS(err, "Cannot start the service controller")
			return nil, false, nil
		}
		services.Start(ctx.Done())
		go c.Run(ctx, int(completed.ComponentConfig.ServiceController.ConcurrentServiceSyncs), controllerContext.ControllerManagerMetrics)
		return nil, true, nil
	}
}

func startClusterLabelController(_ app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok {
			return nil, false, nil
		}
		c, err := clusterlabel.New(ironcoreCloud.IronCore(), ironcoreCloud.ClusterName(), completed.SharedInformers.Core().V1().Nodes(), completed.EventRecorder)
		if err != nil {
			return nil, false, err
		}
		go c.Run(ctx, 2)
		return c, true, nil
	}
}

func startOrphanCollector(_ app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok || ironcoreCloud.Options().OrphanCleanup == config.OrphanCleanupOff {
			return nil, false, nil
		}
		options, cloudConfig := ironcoreCloud.Options(), ironcoreCloud.CloudConfig()
		collector := orphans.New(ironcoreCloud.IronCore(), completed.SharedInformers.Core().V1().Services(), orphans.Settings{
			Cluster:   cloudConfig.ClusterName,
			Aliases:   cloudConfig.ClusterNameAliases,
			Network:   cloudConfig.NetworkName,
			ClusterID: ironcoreCloud.ClusterID(),
			Mode:      options.OrphanCleanup,
			Grace:     options.OrphanGracePeriod,
		})
		go collector.Run(ctx)
		return collector, true, nil
	}
}

// repairWorkers is the load balancer repair controller's workers.
const repairWorkers = 10

func startLoadBalancerRepair(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok {
			return nil, false, nil
		}
		loadBalancers, _ := ironcoreCloud.LoadBalancer()
		client, err := completed.ClientBuilder.Client(initContext.ClientName)
		if err != nil {
			return nil, false, err
		}
		c, err := lbrepair.New(lbrepair.Config{
			IronCore:        ironcoreCloud.IronCore(),
			LoadBalancers:   loadBalancers,
			AllocatedStatus: ironcoreCloud.AllocatedLoadBalancerStatus,
			ReleaseReplaced: ironcoreCloud.ReleaseReplacedLoadBalancers,
			ClusterName:     completed.ComponentConfig.KubeCloudShared.ClusterName,
			Class:           ironcoreCloud.LoadBalancerClass(),
			Services:        completed.SharedInformers.Core().V1().Services(),
			Nodes:           completed.SharedInformers.Core().V1().Nodes(),
			Client:          client,
			Recorder:        completed.EventRecorder,
		})
		if err != nil {
			return nil, false, err
		}
		ironcoreCloud.ReportAddressesOnArrival()
		// Reporting a burst of new addresses is a status write per Service.
		go c.Run(ctx, repairWorkers)
		return c, true, nil
	}
}

// targetWorkers is the load balancer targets controller's workers: a Node's health change
// syncs every Service's targets.
const targetWorkers = 10

func startLoadBalancerTargets(_ app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok {
			return nil, false, nil
		}
		loadBalancers, _ := ironcoreCloud.LoadBalancer()
		options := ironcoreCloud.Options()
		c, err := lbtargets.New(lbtargets.Config{
			IronCore:        ironcoreCloud.IronCore(),
			LoadBalancers:   loadBalancers,
			ClusterName:     completed.ComponentConfig.KubeCloudShared.ClusterName,
			Class:           ironcoreCloud.LoadBalancerClass(),
			Services:        completed.SharedInformers.Core().V1().Services(),
			Nodes:           completed.SharedInformers.Core().V1().Nodes(),
			EndpointSlices:  completed.SharedInformers.Discovery().V1().EndpointSlices(),
			Targets:         ironcoreCloud.Targets(),
			ExplicitRouting: !options.UseNICSelector,
			Resync:          options.TargetResync,
			Recorder:        completed.EventRecorder,
		})
		if err != nil {
			return nil, false, err
		}
		ironcoreCloud.RecheckTargetsWith(c.RecheckSoon)
		go c.Run(ctx, targetWorkers)
		return c, true, nil
	}
}

// ipamWorkers is the node IPAM controller's workers: a burst of joining Nodes each need a
// NetworkInterface write and a Node write.
const ipamWorkers = 10

func startNodeIPAM(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok || !ironcoreCloud.AllocatesPodCIDRs() {
			return nil, false, nil
		}
		client, err := completed.ClientBuilder.Client(initContext.ClientName)
		if err != nil {
			return nil, false, err
		}
		c, err := nodeipam.New(nodeipam.Config{
			IronCore:  ironcoreCloud.IronCore(),
			Allocator: ironcoreCloud,
			Nodes:     completed.SharedInformers.Core().V1().Nodes(),
			Client:    client,
			Recorder:  completed.EventRecorder,
		})
		if err != nil {
			return nil, false, err
		}
		go c.Run(ctx, ipamWorkers)
		return c, true, nil
	}
}
