package main

import (
	"context"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	cloudcontrollerconfig "k8s.io/cloud-provider/app/config"
	cloudnodecontroller "k8s.io/cloud-provider/controllers/node"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/cloud-provider/names"
	genericcontrollermanager "k8s.io/controller-manager/app"
	"k8s.io/controller-manager/controller"
	"k8s.io/klog/v2"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterlabel"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/freshnodes"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodeipam"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodelabels"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/nodesync"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/orphans"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/podcidrs"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// The start functions of the controllers main.go lists: each builds its controller from the
// framework's configuration and the IronCore provider, and runs it until the context ends.

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

// startCloudNodeController starts the upstream cloud node controller as the framework would,
// but on package freshnodes' Node lister and client, so that its updates rarely conflict.
func startCloudNodeController(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, controllerContext genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		client, err := completed.ClientBuilder.Client(initContext.ClientName)
		if err != nil {
			return nil, false, err
		}
		nodes, err := freshnodes.New(completed.SharedInformers.Core().V1().Nodes(), client)
		if err != nil {
			return nil, false, err
		}
		c, err := cloudnodecontroller.NewCloudNodeController(nodes.Informer(), nodes.Client(), cloud,
			completed.ComponentConfig.NodeStatusUpdateFrequency.Duration, completed.ComponentConfig.NodeController.ConcurrentNodeSyncs,
			completed.ComponentConfig.NodeController.ConcurrentNodeStatusUpdates)
		if err != nil {
			// As the framework does: the CCM runs on without initializing Nodes.
			klog.ErrorS(err, "Cannot start the cloud node controller")
			return nil, false, nil
		}
		go c.RunWithContext(ctx, controllerContext.ControllerManagerMetrics)
		return nil, true, nil
	}
}

// clusterLabelWorkers is high because labelling waits for two IronCore writes: with 2 workers,
// 1,000 new Nodes were still being labelled 10 s after everything else had converged (make
// bench). A waiting worker costs no CPU.
const clusterLabelWorkers = 10

func startClusterLabelController(_ app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok {
			return nil, false, nil
		}
		// Where the route controller runs, a new Node's NetworkInterface is labelled by the
		// write of its route.
		c, err := clusterlabel.New(ironcoreCloud.IronCore(), ironcoreCloud.ClusterName(), routedNetwork(ironcoreCloud, completed), completed.SharedInformers.Core().V1().Nodes(), completed.EventRecorder)
		if err != nil {
			return nil, false, err
		}
		go c.Run(ctx, clusterLabelWorkers)
		return c, true, nil
	}
}

// routedNetwork is the Network on which the route controller routes the Nodes' pod CIDRs, or
// empty if it does not run.
func routedNetwork(cloud *provider.Cloud, completed *cloudcontrollerconfig.CompletedConfig) string {
	if completed.ComponentConfig.KubeCloudShared.ConfigureCloudRoutes &&
		genericcontrollermanager.IsControllerEnabled(names.NodeRouteController, app.ControllersDisabledByDefault, completed.ComponentConfig.Generic.Controllers) {
		return cloud.CloudConfig().NetworkName
	}
	return ""
}

func startNodeLabels(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
	return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
		ironcoreCloud, ok := cloud.(*provider.Cloud)
		if !ok {
			return nil, false, nil
		}
		client, err := completed.ClientBuilder.Client(initContext.ClientName)
		if err != nil {
			return nil, false, err
		}
		cloudConfig := ironcoreCloud.CloudConfig()
		c, err := nodelabels.New(ironcoreCloud.IronCore(), client, cloudConfig.NodeLabelAllowList(), completed.SharedInformers.Core().V1().Nodes())
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
		if !ok {
			return nil, false, nil
		}
		// It runs with the orphan cleanup off too: it counts and releases retained LoadBalancers.
		options, cloudConfig := ironcoreCloud.Options(), ironcoreCloud.CloudConfig()
		collector := orphans.New(ironcoreCloud.IronCore(), completed.SharedInformers.Core().V1().Services(), orphans.Settings{
			Cluster:   cloudConfig.ClusterName,
			Aliases:   cloudConfig.ClusterNameAliases,
			Network:   cloudConfig.NetworkName,
			ClusterID: ironcoreCloud.ClusterID(),
			Mode:      options.OrphanCleanup,
			Grace:     options.OrphanGracePeriod,
			Retention: options.RetainedLoadBalancerRetention,
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
			Replacing:       ironcoreCloud.ReplacingLoadBalancers,
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

// newTargets builds the load balancer targets controller on the CCM's informers, before they
// start, and gives it to the provider's load balancers.
func newTargets(cloud *provider.Cloud, completed *cloudcontrollerconfig.CompletedConfig) (*lbtargets.Controller, error) {
	config := lbtargets.ConfigFrom(cloud.Options(), cloud.CloudConfig())
	config.IronCore, config.Owners, config.Recorder = cloud.IronCore(), cloud.LoadBalancerOwners(), completed.EventRecorder
	config.RoutedNetwork = routedNetwork(cloud, completed)
	informers := completed.SharedInformers
	config.Nodes, config.Services, config.EndpointSlices = informers.Core().V1().Nodes(), informers.Core().V1().Services(), informers.Discovery().V1().EndpointSlices()
	targets, err := lbtargets.New(config)
	if err != nil {
		return nil, err
	}
	cloud.UseTargets(targets)
	return targets, nil
}

// startLoadBalancerTargets starts the targets controller built with the provider: it writes
// every load balancer's targets, so the service-lb-controller needs it.
func startLoadBalancerTargets(targets func() *lbtargets.Controller) app.InitFuncConstructor {
	return func(app.ControllerInitContext, *cloudcontrollerconfig.CompletedConfig, cloudprovider.Interface) app.InitFunc {
		return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			c := targets()
			if c == nil {
				return nil, false, nil
			}
			go c.Run(ctx)
			return c, true, nil
		}
	}
}

// ipamWorkers is the node IPAM controller's workers: a burst of joining Nodes each need a
// NetworkInterface write and a Node write.
const ipamWorkers = 10

// newPodCIDRAllocator builds the pod CIDR allocator, or nil, and checks its parent Prefixes so
// that a misconfiguration stops the process at start.
func newPodCIDRAllocator(cloud *provider.Cloud) (*podcidrs.Allocator, error) {
	allocator := podcidrs.ForProvider(cloud, provider.NotReady)
	if allocator == nil {
		return nil, nil
	}
	if err := provider.StartupCheck(context.Background(), "Checking the pod CIDR parents", allocator.Check); err != nil {
		return nil, err
	}
	return allocator, nil
}

// startNodeIPAM starts the node IPAM controller on the pod CIDR allocator built with the
// provider; there is none unless the cloud-config turns pod CIDR allocation on.
func startNodeIPAM(allocator func() *podcidrs.Allocator) app.InitFuncConstructor {
	return func(initContext app.ControllerInitContext, completed *cloudcontrollerconfig.CompletedConfig, cloud cloudprovider.Interface) app.InitFunc {
		return func(ctx context.Context, _ genericcontrollermanager.ControllerContext) (controller.Interface, bool, error) {
			ironcoreCloud, ok := cloud.(*provider.Cloud)
			podCIDRs := allocator()
			if !ok || podCIDRs == nil {
				return nil, false, nil
			}
			client, err := completed.ClientBuilder.Client(initContext.ClientName)
			if err != nil {
				return nil, false, err
			}
			c, err := nodeipam.New(nodeipam.Config{
				IronCore:  ironcoreCloud.IronCore(),
				Allocator: podCIDRs,
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
}
