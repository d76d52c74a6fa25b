package config

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/credentials"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

// Options are the IronCore-specific command-line flags.
type Options struct {
	// IronCoreKubeconfig is the kubeconfig of the IronCore API; its current context's namespace
	// is where the cluster's Machines, NetworkInterfaces and LoadBalancers live.
	IronCoreKubeconfig string
	// UseNICSelector has load balancers select targets by NetworkInterface label and IronCore
	// write the routing. Off by default: IronCore v0.5.0 routes one LoadBalancer at a time, again
	// on each NetworkInterface change; at 1,000 Nodes and 300 Services a Service had traffic after
	// 73 s instead of 34 s (p50, docs/benchmarks/README.md).
	UseNICSelector bool
	// DefaultLoadBalancer makes class-less LoadBalancer Services this CCM's too; false leaves
	// them to another implementation, such as MetalLB.
	DefaultLoadBalancer bool
	// IronCoreQPS and IronCoreBurst limit requests to the IronCore API.
	IronCoreQPS   float32
	IronCoreBurst int
	// OrphanCleanup is what happens to IronCore LoadBalancers of this cluster whose Service is
	// gone, and OrphanGracePeriod how long they must stay orphaned first.
	OrphanCleanup     OrphanCleanup
	OrphanGracePeriod time.Duration
	// RetainedLoadBalancerRetention is how long a retained LoadBalancer is kept before the
	// orphan collector deletes it; zero keeps it.
	RetainedLoadBalancerRetention time.Duration
	// NodeHealth keeps unhealthy Nodes out of load balancer targets; UnreadyGracePeriod is how
	// long a Node's Ready condition may be False or Unknown before that counts.
	NodeHealth         bool
	UnreadyGracePeriod time.Duration
	// TargetResync is how often all targets are compared with IronCore: the backstop for a missed event.
	TargetResync time.Duration
	// DryRun runs every controller while no write leaves the process; DryRunAddress is where
	// the writes it would have made are served.
	DryRun        bool
	DryRunAddress string
}

// OrphanCleanup is a mode of the orphaned load balancer cleanup.
type OrphanCleanup string

// AmbiguousClusterName is Kubernetes' default --cluster-name: other clusters likely share it, so
// the orphan collector does not delete on the strength of it.
const AmbiguousClusterName = "kubernetes"

// The modes of OrphanCleanup.
const (
	OrphanCleanupDelete OrphanCleanup = "delete"
	OrphanCleanupReport OrphanCleanup = "report"
	OrphanCleanupOff    OrphanCleanup = "off"
)

// NewOptions returns the options with their defaults.
func NewOptions() *Options {
	return &Options{
		DefaultLoadBalancer: true,
		// 1,000 new Nodes and 300 Services write IronCore some 2,700 times: at 50 requests per
		// second they filled the budget for 35 s, with the Services' LoadBalancers waiting in it.
		// IronCore's API server applies its own priority and fairness.
		IronCoreQPS:        200,
		IronCoreBurst:      400,
		OrphanCleanup:      OrphanCleanupDelete,
		OrphanGracePeriod:  10 * time.Minute,
		NodeHealth:         true,
		UnreadyGracePeriod: time.Minute,
		TargetResync:       10 * time.Minute,
		DryRunAddress:      "127.0.0.1:10290",
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.IronCoreKubeconfig, "ironcore-kubeconfig", o.IronCoreKubeconfig,
		"Path to the kubeconfig of the IronCore API. The namespace of its current context holds the cluster's IronCore objects and must be set. "+
			"It is read again when it changes and when IronCore answers 401: rotated credentials are taken up without a restart.")
	fs.BoolVar(&o.UseNICSelector, "use-nic-selector", o.UseNICSelector,
		"Select load balancer targets with a NetworkInterface label selector and let IronCore maintain the LoadBalancerRouting. If false (the default), the CCM writes the LoadBalancerRouting from the Nodes' NetworkInterfaces, which reaches every Node far sooner at scale.")
	fs.BoolVar(&o.DefaultLoadBalancer, "default-load-balancer", o.DefaultLoadBalancer,
		"Serve Services of type LoadBalancer without spec.loadBalancerClass, besides those of class ironcore.dev/load-balancer. "+
			"If false, class-less Services are left to another implementation (MetalLB, Cilium): no finalizer, no status, no event; "+
			"one already served keeps its LoadBalancer until it is deleted.")
	fs.Float32Var(&o.IronCoreQPS, "ironcore-api-qps", o.IronCoreQPS, "Sustained requests per second to the IronCore API, shared by every IronCore request of the process; load balancer work goes before Node labels and pod CIDRs.")
	fs.IntVar(&o.IronCoreBurst, "ironcore-api-burst", o.IronCoreBurst, "Requests to the IronCore API allowed in a burst above --ironcore-api-qps.")
	fs.StringVar((*string)(&o.OrphanCleanup), "orphan-load-balancer-cleanup", string(o.OrphanCleanup),
		"What to do with IronCore LoadBalancers of this cluster whose Service no longer exists or no longer wants one: delete (log and delete them), report (only log them), or off. "+
			"Only LoadBalancers marked with this cluster's identity (label "+keys.LabelClusterID+") on the cloud-config's Network are deleted; others recording this cluster's name are logged and counted as refused. "+
			"With the cluster name kubernetes, which other clusters likely share, delete acts as report.")
	fs.DurationVar(&o.OrphanGracePeriod, "orphan-load-balancer-grace-period", o.OrphanGracePeriod,
		"How long an IronCore LoadBalancer must have been orphaned before it is deleted or reported.")
	fs.DurationVar(&o.RetainedLoadBalancerRetention, "retained-load-balancer-retention", o.RetainedLoadBalancerRetention,
		"How long an IronCore LoadBalancer retained after its Service (annotation "+keys.AnnotationRetainLoadBalancer+") keeps its addresses before it is deleted, "+
			"counted from its annotation "+keys.AnnotationRetainedAt+"; it must carry this cluster's identity and be on the cloud-config's Network. "+
			"With --orphan-load-balancer-cleanup=report it is only reported. Zero (the default) keeps retained LoadBalancers until they are deleted on IronCore.")
	fs.BoolVar(&o.NodeHealth, "load-balancer-node-health", o.NodeHealth,
		"Keep unhealthy Nodes out of load balancer targets, as a load balancer health check would: Nodes whose Machine is shut down or terminating, "+
			"whose Ready condition has been False or Unknown longer than --load-balancer-unready-grace-period, that are tainted as shut down or for deletion by the cluster autoscaler, or that are being deleted. "+
			"If every Node that could serve a Service is unhealthy, all of them stay targets. If false, only the service controller's rules apply.")
	fs.DurationVar(&o.UnreadyGracePeriod, "load-balancer-unready-grace-period", o.UnreadyGracePeriod,
		"How long a Node's Ready condition may be False or Unknown before the Node stops receiving load balancer traffic (with --load-balancer-node-health).")
	fs.DurationVar(&o.TargetResync, "load-balancer-target-resync", o.TargetResync,
		"How often every load balancer's targets (target labels and the routings the CCM writes) are compared with IronCore and repaired, "+
			"beside the repairs that watches trigger within seconds: the backstop for a change no watch reported. Zero turns the resync off.")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun,
		"Decide everything and write nothing: every controller runs on the live caches, and every write to IronCore and to the cluster "+
			"(creates, updates, patches, deletes, events) is recorded instead of sent, each change once however often it is retried. "+
			"No leader election takes place (a dry run never competes with the CCM in charge) and it decides as the leader would. "+
			"The recorded writes are served as JSON on --dry-run-address (ironcore-ccm-inspect dry-run reads them) and counted in "+
			"the metrics ironcore_ccm_dry_run_changes_total and ironcore_ccm_dry_run_write_attempts_total. Use it to preview a switch.")
	fs.StringVar(&o.DryRunAddress, "dry-run-address", o.DryRunAddress,
		"With --dry-run, the host:port whose /dry-run path serves the recorded writes, over plain HTTP: keep it on loopback and reach it with kubectl port-forward.")
}

// Validate reports every problem with the options at once.
func (o *Options) Validate() error {
	var errs []error
	if o.IronCoreKubeconfig == "" {
		errs = append(errs, errors.New("--ironcore-kubeconfig is required"))
	}
	if o.IronCoreQPS <= 0 {
		errs = append(errs, fmt.Errorf("--ironcore-api-qps must be positive, not %v", o.IronCoreQPS))
	}
	if o.IronCoreBurst < 1 {
		errs = append(errs, fmt.Errorf("--ironcore-api-burst must be at least 1, not %d", o.IronCoreBurst))
	}
	switch o.OrphanCleanup {
	case OrphanCleanupDelete, OrphanCleanupReport, OrphanCleanupOff:
	default:
		errs = append(errs, fmt.Errorf("--orphan-load-balancer-cleanup must be delete, report or off, not %q", o.OrphanCleanup))
	}
	if o.OrphanGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("--orphan-load-balancer-grace-period must not be negative, not %s", o.OrphanGracePeriod))
	}
	if o.RetainedLoadBalancerRetention < 0 {
		errs = append(errs, fmt.Errorf("--retained-load-balancer-retention must not be negative, not %s", o.RetainedLoadBalancerRetention))
	}
	if o.TargetResync < 0 {
		errs = append(errs, fmt.Errorf("--load-balancer-target-resync must not be negative, not %s", o.TargetResync))
	}
	if o.UnreadyGracePeriod < 0 {
		errs = append(errs, fmt.Errorf("--load-balancer-unready-grace-period must not be negative, not %s", o.UnreadyGracePeriod))
	}
	if o.DryRun && o.DryRunAddress == "" {
		errs = append(errs, errors.New("--dry-run-address must be set with --dry-run"))
	}
	return errors.Join(errs...)
}

// IronCoreRESTConfig returns the IronCore kubeconfig's client configuration and the namespace of
// its current context, which must be set: "default" would put load balancers anywhere.
func (o *Options) IronCoreRESTConfig() (*rest.Config, string, error) {
	contents, err := os.ReadFile(o.IronCoreKubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("read IronCore kubeconfig: %w", err)
	}
	return o.ironCoreConfig(contents)
}

// IronCoreCredentials is IronCoreRESTConfig for a process that runs on: the configuration's
// credentials come from the returned Transport, which reads the kubeconfig again when it
// changes (once Watched) and when IronCore answers 401. A changed kubeconfig must keep the
// namespace.
func (o *Options) IronCoreCredentials() (*credentials.Transport, *rest.Config, string, error) {
	_, namespace, err := o.IronCoreRESTConfig()
	if err != nil {
		return nil, nil, "", err
	}
	probe := "/apis/networking.ironcore.dev/v1alpha1/namespaces/" + namespace + "/networks?limit=1"
	transport, cfg, err := credentials.New("ironcore", o.IronCoreKubeconfig, probe, func(contents []byte) (*rest.Config, error) {
		cfg, changed, err := o.ironCoreConfig(contents)
		if err == nil && changed != namespace {
			err = fmt.Errorf("IronCore kubeconfig %s: its context's namespace is now %q, not %q; restart to move to another namespace", o.IronCoreKubeconfig, changed, namespace)
		}
		return cfg, err
	})
	return transport, cfg, namespace, err
}

// ironCoreConfig reads the IronCore kubeconfig's contents as IronCoreRESTConfig does.
func (o *Options) ironCoreConfig(contents []byte) (*rest.Config, string, error) {
	raw, err := credentials.Parse(o.IronCoreKubeconfig, contents)
	if err != nil {
		return nil, "", fmt.Errorf("read IronCore kubeconfig %s: %w", o.IronCoreKubeconfig, err)
	}
	if raw.CurrentContext == "" {
		return nil, "", fmt.Errorf("IronCore kubeconfig %s has no current context", o.IronCoreKubeconfig)
	}
	kubeContext, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return nil, "", fmt.Errorf("IronCore kubeconfig %s: current context %q is not defined", o.IronCoreKubeconfig, raw.CurrentContext)
	}
	if kubeContext.Namespace == "" {
		return nil, "", fmt.Errorf("IronCore kubeconfig %s: context %q sets no namespace; set the IronCore namespace of this cluster's Machines there", o.IronCoreKubeconfig, raw.CurrentContext)
	}
	restConfig, err := clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("IronCore kubeconfig %s: %w", o.IronCoreKubeconfig, err)
	}
	restConfig.QPS = o.IronCoreQPS
	restConfig.Burst = o.IronCoreBurst
	return restConfig, kubeContext.Namespace, nil
}
