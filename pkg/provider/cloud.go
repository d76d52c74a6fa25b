// Package provider implements the k8s.io/cloud-provider interfaces for IronCore. The adapters
// here translate between Kubernetes objects and the IronCore access layer; they hold no
// IronCore API logic of their own.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/clusterid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/credentials"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/dryrun"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/leasefence"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// ProviderName is the value of --cloud-provider this CCM answers to.
const ProviderName = providerid.Scheme

// startupCheckTimeout bounds the checks New makes against the IronCore API, and
// startupAttemptTimeout each attempt: one hung request must leave time to try again.
const startupCheckTimeout, startupAttemptTimeout = 15 * time.Second, 5 * time.Second

// clusterIDWait bounds how long Initialize waits for the cluster's identity, so that the first
// LoadBalancer syncs already mark LoadBalancers with it.
const clusterIDWait = 10 * time.Second

// Settings is what New builds a Cloud from.
type Settings struct {
	// CloudConfigPath is the --cloud-config file.
	CloudConfigPath string
	// ClusterNameFlag is --cluster-name, and ClusterNameFlagSet whether it was given.
	ClusterNameFlag    string
	ClusterNameFlagSet bool
	// Options are the IronCore flags.
	Options *config.Options
	// Recorder records events on Nodes and Services.
	Recorder record.EventRecorder
	// LeaseFence, with leader election on, keeps this replica from writing to IronCore
	// unless it renewed the leader lease within the renew deadline; nil without leader
	// election.
	LeaseFence *leasefence.Fence
	// DryRun, with --dry-run, takes every write to IronCore instead of the API server.
	DryRun *dryrun.Recorder
}

// Cloud is the IronCore cloud provider.
type Cloud struct {
	config        config.CloudConfig
	options       config.Options
	credentials   *credentials.Transport
	ironcore      *ironcore.Client
	clusterID     *clusterid.ID
	instances     *instances
	loadBalancers *loadBalancers
	routes        *routes
}

var (
	_ cloudprovider.Interface    = (*Cloud)(nil)
	_ cloudprovider.InformerUser = (*Cloud)(nil)
	_ cloudprovider.InstancesV2  = (*instances)(nil)
)

// New reads the configuration and connects to IronCore, checking the Network (and Prefix)
// exist, so that a misconfiguration stops the process at start with one clear message.
func New(ctx context.Context, settings Settings) (*Cloud, error) {
	options := settings.Options
	optionsErr := options.Validate()
	cloudConfig, err := config.ReadCloudConfig(settings.CloudConfigPath)
	if err != nil {
		return nil, errors.Join(optionsErr, err)
	}
	if err := cloudConfig.ResolveClusterName(settings.ClusterNameFlag, settings.ClusterNameFlagSet); err != nil {
		return nil, errors.Join(optionsErr, err)
	}
	if err := errors.Join(optionsErr, cloudConfig.Validate()); err != nil {
		return nil, err
	}

	kubeconfig, restConfig, namespace, err := options.IronCoreCredentials()
	if err != nil {
		return nil, err
	}
	checkCtx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	var client *ironcore.Client
	if err := retryTransient(checkCtx, "Connecting to IronCore", func(ctx context.Context) (err error) {
		client, err = ironcore.NewWithin(ctx, restConfig, namespace)
		return err
	}); err != nil {
		return nil, err
	}
	if settings.LeaseFence != nil {
		// From the start, every write to IronCore carries the fence's deadline and is not sent
		// after it; until this replica first writes its lease, the fence refuses all.
		client.FenceWrites(settings.LeaseFence)
	}
	if settings.DryRun != nil {
		client.RecordWrites(settings.DryRun.For(dryrun.IronCore))
	}
	if err := retryTransient(checkCtx, "Checking the Network", func(ctx context.Context) error { return client.CheckNetwork(ctx, cloudConfig.NetworkName) }); err != nil {
		return nil, fmt.Errorf("networkName: %w", err)
	}
	internalPrefixes := map[corev1.IPFamily]string{}
	for _, prefix := range []struct {
		key, name string
		family    corev1.IPFamily
	}{{"prefixName", cloudConfig.PrefixName, corev1.IPv4Protocol}, {"ipv6PrefixName", cloudConfig.IPv6PrefixName, corev1.IPv6Protocol}} {
		if prefix.name == "" {
			continue
		}
		if err := retryTransient(checkCtx, "Checking a Prefix", func(ctx context.Context) error { return client.CheckPrefix(ctx, prefix.name, prefix.family) }); err != nil {
			return nil, fmt.Errorf("%s: %w", prefix.key, err)
		}
		internalPrefixes[prefix.family] = prefix.name
	}
	routes := &routes{ironcore: client, cluster: cloudConfig.ClusterName, network: cloudConfig.NetworkName}
	if len(cloudConfig.PodCIDRFamilies()) > 0 {
		// Before the informers are registered: the pod CIDR allocator reads its Prefixes from the cache.
		client.CachePodCIDRPrefixes()
	}
	if options.UseNICSelector {
		// IronCore writes the routings; this CCM reads one only when a selector moves or a
		// LoadBalancer is deleted.
		client.ReadRoutingsLive(cloudConfig.ClusterName)
	}
	if err := retryTransient(checkCtx, "Registering the IronCore informers", func(ctx context.Context) error { return client.RegisterInformers(ctx) }); err != nil {
		return nil, err
	}
	clusterID := clusterid.New()
	klog.InfoS("Configured IronCore cloud provider", "namespace", namespace, "network", cloudConfig.NetworkName,
		"prefix", cloudConfig.PrefixName, "cluster", cloudConfig.ClusterName, "useNICSelector", options.UseNICSelector, "podCIDRAllocation", len(cloudConfig.PodCIDRFamilies()) > 0)

	loadBalancers := &loadBalancers{
		ironcore: client,
		retries:  newRetryDelays(),
		settings: lbspec.Settings{
			Cluster:          cloudConfig.ClusterName,
			Aliases:          cloudConfig.ClusterNameAliases,
			ClusterID:        clusterID,
			Network:          cloudConfig.NetworkName,
			InternalPrefixes: internalPrefixes,
			UseNICSelector:   options.UseNICSelector,
		},
		recorder:        settings.Recorder,
		clusterNameFlag: settings.ClusterNameFlag,
	}
	return &Cloud{
		config:        *cloudConfig,
		options:       *options,
		credentials:   kubeconfig,
		ironcore:      client,
		clusterID:     clusterID,
		instances:     &instances{ironcore: client, network: cloudConfig.NetworkName, recorder: settings.Recorder, nodeLabels: cloudConfig.NodeLabelAllowList()},
		loadBalancers: loadBalancers,
		routes:        routes,
	}, nil
}

// ClusterName is the name that identifies this cluster on IronCore objects.
func (c *Cloud) ClusterName() string { return c.config.ClusterName }

// Options are the IronCore flags the provider was built with.
func (c *Cloud) Options() config.Options { return c.options }

// LoadBalancerClass says which Services are this CCM's (--default-load-balancer).
func (c *Cloud) LoadBalancerClass() lbclass.Policy {
	return lbclass.Policy{ClassOnly: !c.options.DefaultLoadBalancer}
}

// IronCore is the access layer, shared with the CCM's own controllers.
func (c *Cloud) IronCore() *ironcore.Client { return c.ironcore }

// CloudConfig is the cloud-config the provider was built with, its cluster name resolved.
func (c *Cloud) CloudConfig() config.CloudConfig { return c.config }

// ClusterID is the target cluster's identity, known once Initialize has read it.
func (c *Cloud) ClusterID() *clusterid.ID { return c.clusterID }

// Initialize starts the IronCore cache, the watch of the IronCore kubeconfig (rotated
// credentials are taken up without a restart) and reads the cluster's identity. The framework
// calls it once this replica leads.
func (c *Cloud) Initialize(clientBuilder cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	ctx := wait.ContextForChannel(stop)
	if err := c.credentials.Watch(ctx); err != nil {
		// A 401 from IronCore still has the kubeconfig read again.
		klog.ErrorS(err, "Cannot watch the IronCore kubeconfig for changes")
	}
	go func() {
		if err := c.ironcore.Start(ctx); err != nil {
			klog.ErrorS(err, "IronCore cache stopped")
		}
	}()
	// Without a client (in tests) the identity stays unknown: LoadBalancers are not marked and
	// the orphan collector does not run.
	if clientBuilder != nil {
		go func() {
			if err := c.clusterID.Resolve(ctx, clientBuilder); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "Cannot read the cluster's identity")
			}
		}()
		select {
		case <-c.clusterID.Ready():
		case <-time.After(clusterIDWait):
		case <-ctx.Done():
		}
	}
}

// retryTransient retries a start-up step with backoff while IronCore or the way to it fails: a
// Deployment whose CCM exits on the first 500 backs off for minutes. A misconfiguration still
// ends the process at once.
func retryTransient(ctx context.Context, step string, fn func(context.Context) error) error {
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		attemptCtx, cancel := context.WithTimeout(ctx, startupAttemptTimeout)
		err := fn(attemptCtx)
		cancel()
		if err == nil || !ironcore.Transient(err) {
			return err
		}
		klog.InfoS("IronCore failed a start-up step; trying again", "step", step, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (tried %d times for %s)", err, attempt, startupCheckTimeout)
		case <-time.After(delay):
		}
		delay = min(2*delay, 4*time.Second)
	}
}

// ProviderName returns "ironcore".
func (c *Cloud) ProviderName() string { return ProviderName }

// HasClusterID is true: the cluster name is required configuration.
func (c *Cloud) HasClusterID() bool { return true }

// InstancesV2 serves Node lifecycle from IronCore Machines.
func (c *Cloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return c.instances, true }

// Instances is not implemented; InstancesV2 replaces it.
func (c *Cloud) Instances() (cloudprovider.Instances, bool) { return nil, false }

// LoadBalancer serves Services of type LoadBalancer with IronCore LoadBalancers.
func (c *Cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c.loadBalancers, true }

// Zones is not implemented; InstancesV2 reports zones.
func (c *Cloud) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters is not implemented.
func (c *Cloud) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes programs pod CIDRs as prefixes of the Nodes' NetworkInterfaces.
func (c *Cloud) Routes() (cloudprovider.Routes, bool) { return c.routes, true }

// ReportAddressesOnArrival tells the provider that a controller writes late addresses into the
// Service's status, so EnsureLoadBalancer returns what is allocated so far instead of asking to
// be retried, which the service controller reports as a Warning event.
func (c *Cloud) ReportAddressesOnArrival() { c.loadBalancers.addressesReported.Store(true) }

// AllocatedLoadBalancerStatus is loadBalancers.AllocatedStatus.
func (c *Cloud) AllocatedLoadBalancerStatus(ctx context.Context, clusterName string, service *corev1.Service) (*corev1.LoadBalancerStatus, lbspec.Pending, error) {
	return c.loadBalancers.AllocatedStatus(ctx, clusterName, service)
}

// ReleaseReplacedLoadBalancers deletes the LoadBalancers a type switch of the Service replaced,
// once the Service shows the addresses of the new one.
func (c *Cloud) ReleaseReplacedLoadBalancers(ctx context.Context, clusterName string, service *corev1.Service) error {
	return c.loadBalancers.ReleaseReplaced(ctx, clusterName, service)
}

// ReplacingLoadBalancers is loadBalancers.Replacing: whether the Service has LoadBalancers of
// more than one type, from the IronCore cache.
func (c *Cloud) ReplacingLoadBalancers(ctx context.Context, clusterName string, service *corev1.Service) (bool, error) {
	return c.loadBalancers.Replacing(ctx, clusterName, service)
}

// SetInformers gives the provider the CCM's shared informers; routes read Nodes from them.
// The framework calls it after Initialize and before it starts the informers.
func (c *Cloud) SetInformers(factory informers.SharedInformerFactory) {
	c.routes.nodes = factory.Core().V1().Nodes().Lister()
	endpointSlices := factory.Discovery().V1().EndpointSlices()
	nodes, services := factory.Core().V1().Nodes(), factory.Core().V1().Services()
	// No controller of this process reads the managed fields of these objects, which every
	// writer of a Node (kubelet, node-lifecycle and this CCM) adds to. Updates of a stripped
	// copy leave them as they are on the API server.
	for _, informer := range []toolscache.SharedIndexInformer{nodes.Informer(), services.Informer(), endpointSlices.Informer()} {
		if err := informer.SetTransform(cache.TransformStripManagedFields()); err != nil {
			klog.InfoS("The cluster's objects are cached with their managed fields", "reason", err)
		}
	}
}

// UseTargets gives the load balancers the targets controller, which writes their targets.
// Call it before the service controller starts.
func (c *Cloud) UseTargets(targets targetsapi.Targets) { c.loadBalancers.targets = targets }

// LoadBalancerTargets is the targets controller UseTargets gave.
func (c *Cloud) LoadBalancerTargets() targetsapi.Targets { return c.loadBalancers.targets }

// LoadBalancerOwners tells which LoadBalancers are this cluster's.
func (c *Cloud) LoadBalancerOwners() ironcore.Owners {
	return c.loadBalancers.owners(c.loadBalancers.clusterNameFlag)
}

// NodeNetworkInterface names the NetworkInterface the Node's pod CIDRs go on, its route's; an
// error for which NotReady is true says IronCore has not yet filled in what tells it.
func (c *Cloud) NodeNetworkInterface(ctx context.Context, node *corev1.Node) (string, error) {
	return c.routes.networkInterfaceOfNode(ctx, node, nil)
}

// NodesByMachine maps Machine names to every Node that may run on them, from the cache.
func (c *Cloud) NodesByMachine(ctx context.Context) (map[string][]*corev1.Node, error) {
	return c.routes.claimsByMachine(ctx)
}

// NotReady tells an error of the provider that says IronCore has not yet filled in what a Node
// needs: the caller waits for it rather than fails.
func NotReady(err error) bool { return errors.Is(err, errNotReady) }

// StartupCheck runs a check of the configuration against IronCore as New runs its own: again
// while IronCore fails in a way a later attempt may not, for as long as New's checks may take.
func StartupCheck(ctx context.Context, step string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	return retryTransient(ctx, step, check)
}
