package inspect

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
)

// Output formats.
const (
	OutputTable = "table"
	OutputJSON  = "json"
)

// defaultClusterNameFlag is the CCM's --cluster-name default. The CCM passes it to the load
// balancer calls even when it is not set, and accepts LoadBalancers recorded with it (the
// reference CCM recorded --cluster-name), so ownership is judged with it here too.
const defaultClusterNameFlag = "kubernetes"

// Options are the inspect tool's flags.
type Options struct {
	// Kubeconfig is the target cluster's kubeconfig; empty means $KUBECONFIG, ~/.kube/config
	// or the in-cluster configuration, as kubectl finds them.
	Kubeconfig string
	// IronCoreKubeconfig is the IronCore API's kubeconfig; its current context's namespace is
	// the cluster's IronCore namespace, as for the CCM.
	IronCoreKubeconfig string
	// CloudConfig is the CCM's cloud-config file.
	CloudConfig string
	// ClusterName is --cluster-name, and ClusterNameSet whether it was given.
	ClusterName    string
	ClusterNameSet bool
	// Output is OutputTable or OutputJSON.
	Output string
	// Timeout bounds the whole inspection.
	Timeout time.Duration
	// NodeHealth and UnreadyGracePeriod are the CCM's flags of the same names, which decide
	// which Nodes are load balancer targets.
	NodeHealth         bool
	UnreadyGracePeriod time.Duration
	// DefaultLoadBalancer is the CCM's flag of the same name: whether class-less Services are
	// the CCM's.
	DefaultLoadBalancer bool
}

// NewOptions returns the options with their defaults.
func NewOptions() *Options {
	return &Options{ClusterName: defaultClusterNameFlag, Output: OutputTable, Timeout: time.Minute, NodeHealth: true, UnreadyGracePeriod: targetrules.DefaultReadyGrace,
		DefaultLoadBalancer: true}
}

// AddFlags registers the options on fs. Call SetChanged after parsing.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the target cluster (default: $KUBECONFIG, ~/.kube/config or in-cluster, as kubectl).")
	fs.StringVar(&o.IronCoreKubeconfig, "ironcore-kubeconfig", o.IronCoreKubeconfig,
		"Kubeconfig of the IronCore API; the namespace of its current context is the cluster's IronCore namespace and must be set. Required.")
	fs.StringVar(&o.CloudConfig, "cloud-config", o.CloudConfig, "The CCM's cloud-config file. Required.")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "The CCM's --cluster-name, if it is given one; resolved with the cloud-config's clusterName as the CCM does.")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "Output format: table or json.")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long the whole inspection may take.")
	fs.BoolVar(&o.NodeHealth, "load-balancer-node-health", o.NodeHealth, "The CCM's --load-balancer-node-health: whether unhealthy Nodes are kept out of load balancer targets.")
	fs.DurationVar(&o.UnreadyGracePeriod, "load-balancer-unready-grace-period", o.UnreadyGracePeriod, "The CCM's --load-balancer-unready-grace-period.")
	fs.BoolVar(&o.DefaultLoadBalancer, "default-load-balancer", o.DefaultLoadBalancer, "The CCM's --default-load-balancer: whether Services without a load balancer class are the CCM's.")
}

// SetChanged records which flags were given on the command line.
func (o *Options) SetChanged(fs *pflag.FlagSet) {
	o.ClusterNameSet = fs.Changed("cluster-name")
}

// Validate reports every problem with the options at once.
func (o *Options) Validate() error {
	var errs []error
	if o.IronCoreKubeconfig == "" {
		errs = append(errs, errors.New("--ironcore-kubeconfig is required"))
	}
	if o.CloudConfig == "" {
		errs = append(errs, errors.New("--cloud-config is required"))
	}
	if o.Output != OutputTable && o.Output != OutputJSON {
		errs = append(errs, fmt.Errorf("--output must be table or json, not %q", o.Output))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, not %s", o.Timeout))
	}
	return errors.Join(errs...)
}
