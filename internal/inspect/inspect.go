// Package inspect reports how a cluster's Nodes, Services of type LoadBalancer and pod routes
// map to IronCore, as the CCM sees them, and what differs: for operators debugging the CCM.
//
// It only reads. It looks at IronCore through the CCM's own access layer and lookups
// (internal/ironcore, provider.ReadOnly), so that it reports what the CCM would conclude, not
// a second opinion. IronCore is read through the same informer cache the CCM uses, started
// once and synced: its indexes (Machines by guest hostname, LoadBalancers by Service UID) are
// what the CCM's lookups need, and one list per kind is cheaper than a read per object.
package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbclass"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// inspection is one run: the cluster's settings, its clients and the target cluster's
// objects, listed once.
type inspection struct {
	ironcore *ironcore.Client
	view     *provider.ReadOnly
	cluster  string
	// clusterNameFlag is --cluster-name, whose default the CCM also accepts on LoadBalancers
	// (see defaultClusterNameFlag).
	clusterNameFlag string
	network         string
	nodes           []corev1.Node
	services        []corev1.Service
	endpointSlices  []discoveryv1.EndpointSlice
	health          targetrules.Health
	// class says which Services the CCM serves.
	class lbclass.Policy
	// nodeOfMachine maps Machine names to the Nodes the CCM finds on them; filled by the
	// Nodes section, read by the later ones.
	nodeOfMachine map[string]string
}

// Run inspects the cluster that opts describe and returns what it found. Errors are about
// the inspection itself (configuration, connections, reads); what it finds is in the report.
func Run(ctx context.Context, opts *Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel() // also stops the IronCore cache
	// Everything that can be wrong with the files is checked before the first request.
	cloudConfig, err := loadCloudConfig(opts)
	if err != nil {
		return nil, err
	}
	client, err := newIronCoreClient(opts.IronCoreKubeconfig)
	if err != nil {
		return nil, err
	}
	target, err := targetClient(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	nodes, err := target.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the target cluster's Nodes: %w", err)
	}
	services, err := target.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the target cluster's Services: %w", err)
	}
	slices, err := target.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the target cluster's EndpointSlices: %w", err)
	}
	if err := startIronCore(ctx, client, cloudConfig.NetworkName, opts.Timeout); err != nil {
		return nil, err
	}
	lister, err := nodeLister(nodes.Items)
	if err != nil {
		return nil, err
	}
	in := &inspection{
		ironcore:        client,
		view:            provider.NewReadOnly(client, cloudConfig.ClusterName, cloudConfig.NetworkName, lister),
		cluster:         cloudConfig.ClusterName,
		clusterNameFlag: opts.ClusterName,
		network:         cloudConfig.NetworkName,
		nodes:           nodes.Items,
		services:        services.Items,
		endpointSlices:  slices.Items,
		health:          targetrules.Health{Enabled: opts.NodeHealth, ReadyGrace: opts.UnreadyGracePeriod},
		class:           lbclass.Policy{ClassOnly: !opts.DefaultLoadBalancer},
	}
	return in.run(ctx)
}

// loadCloudConfig reads the cloud-config and settles the cluster name exactly as the CCM does.
func loadCloudConfig(opts *Options) (*config.CloudConfig, error) {
	cloudConfig, err := config.ReadCloudConfig(opts.CloudConfig)
	if err != nil {
		return nil, err
	}
	if err := cloudConfig.ResolveClusterName(opts.ClusterName, opts.ClusterNameSet); err != nil {
		return nil, err
	}
	if err := cloudConfig.Validate(); err != nil {
		return nil, fmt.Errorf("cloud-config %s: %w", opts.CloudConfig, err)
	}
	return cloudConfig, nil
}

// targetClient connects to the target cluster as kubectl would with --kubeconfig.
func targetClient(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("target cluster kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("target cluster client: %w", err)
	}
	return client, nil
}

// newIronCoreClient builds the CCM's IronCore client from the kubeconfig, whose context must
// name the namespace, as for the CCM. It makes no request.
func newIronCoreClient(kubeconfig string) (*ironcore.Client, error) {
	options := config.NewOptions()
	options.IronCoreKubeconfig = kubeconfig
	restConfig, namespace, err := options.IronCoreRESTConfig()
	if err != nil {
		return nil, err
	}
	return ironcore.New(restConfig, namespace)
}

// startIronCore checks, as the CCM does at start, that IronCore is reachable and the Network
// exists (one clear error rather than a cache that never syncs), then starts the cache and
// waits until it has listed everything. The cache stops when ctx ends.
func startIronCore(ctx context.Context, client *ironcore.Client, network string, timeout time.Duration) error {
	if err := client.CheckNetwork(ctx, network); err != nil {
		return fmt.Errorf("networkName: %w", err)
	}
	if err := client.RegisterInformers(ctx); err != nil {
		return err
	}
	started := make(chan error, 1)
	syncCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		started <- client.Start(ctx)
		stopWaiting() // a cache that failed to start will never sync
	}()
	if client.WaitForCacheSync(syncCtx) {
		return nil
	}
	select {
	case err := <-started:
		if err != nil {
			return fmt.Errorf("start the IronCore cache: %w", err)
		}
	default:
	}
	return fmt.Errorf("the IronCore cache of namespace %s did not sync within --timeout=%s: listing and watching Machines, MachinePools, Networks, NetworkInterfaces, LoadBalancers and LoadBalancerRoutings must be allowed",
		client.Namespace(), timeout)
}

// nodeLister serves the listed Nodes to the CCM's route lookups, which read a lister.
func nodeLister(nodes []corev1.Node) (corelisters.NodeLister, error) {
	indexer := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	for i := range nodes {
		if err := indexer.Add(&nodes[i]); err != nil {
			return nil, fmt.Errorf("index Node %s: %w", nodes[i].Name, err)
		}
	}
	return corelisters.NewNodeLister(indexer), nil
}

// run builds the report section by section; the Nodes come first, as the others name the
// Nodes on Machines.
func (in *inspection) run(ctx context.Context) (*Report, error) {
	slices.SortFunc(in.nodes, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(in.services, func(a, b corev1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	report := &Report{Cluster: in.cluster, Namespace: in.ironcore.Namespace(), Network: in.network}
	report.Nodes = in.inspectNodes(ctx)
	in.nodeOfMachine = map[string]string{}
	for _, node := range report.Nodes {
		if node.Machine != "" {
			in.nodeOfMachine[node.Machine] = node.Name
		}
	}
	var err error
	if report.Services, report.Conflicts, err = in.inspectServices(ctx); err != nil {
		return nil, err
	}
	// Orphans and retained LoadBalancers are found among the same list.
	lbs, err := in.ironcore.LoadBalancers(ctx)
	if err != nil {
		return nil, err
	}
	report.Orphans = in.findOrphans(lbs)
	report.Retained = in.findRetained(lbs)
	if report.Routes, err = in.inspectRoutes(ctx); err != nil {
		return nil, err
	}
	return report, nil
}

// isNotFound tells a missing object from a failed read.
func isNotFound(err error) bool { return errors.Is(err, ironcore.ErrNotFound) }
