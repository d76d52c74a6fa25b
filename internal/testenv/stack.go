package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1alpha1 "github.com/ironcore-dev/ironcore/api/core/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreenvtest "github.com/ironcore-dev/ironcore/utils/envtest"
	"github.com/ironcore-dev/ironcore/utils/envtest/apiserver"
	"github.com/ironcore-dev/ironcore/utils/envtest/controllermanager"
	"github.com/ironcore-dev/ironcore/utils/envtest/process"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/deploy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/simulator"
)

// Options configure a Stack.
type Options struct {
	// Progress receives what the stack is doing while it starts; nil discards it.
	Progress io.Writer
	// ClusterName is the cluster's name in the CCM's cloud-config.
	ClusterName string
	// Namespace is the IronCore namespace of the cluster's objects.
	Namespace string
	// Network is the cluster Network.
	Network string
	// SimulatorLatency delays every status the simulated providers write.
	SimulatorLatency time.Duration
	// Purpose names a run that should have the machine to itself ("demo", "lab", "benchmark"):
	// Start refuses to run beside another such run that is still running. Tests leave it
	// empty; several of their stacks run at once.
	Purpose string
}

func (o *Options) setDefaults() {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.ClusterName == "" {
		o.ClusterName = "lab"
	}
	if o.Namespace == "" {
		o.Namespace = "tenant"
	}
	if o.Network == "" {
		o.Network = "cluster-network"
	}
}

// Fixed names of the objects every stack has.
const (
	// MachineClass is the class of Machines created by the fixtures.
	MachineClass = "x3-medium"
	// NodePrefixV4 and NodePrefixV6 are the root Prefixes node IPs are allocated from.
	NodePrefixV4 = "nodes-v4"
	NodePrefixV6 = "nodes-v6"
	// LoadBalancerPrefix and LoadBalancerPrefixV6 are the root Prefixes internal load balancer
	// IPs come from.
	LoadBalancerPrefix   = "internal-lbs"
	LoadBalancerPrefixV6 = "internal-lbs-v6"
)

// Pools returns the simulated MachinePools of every stack and their topology.
func Pools() map[string]simulator.Topology {
	return map[string]simulator.Topology{
		"pool-a": {Zone: "zone-a", Region: "region-1"},
		"pool-b": {Zone: "zone-b", Region: "region-1"},
	}
}

// Cluster is one control plane of the stack, with administrator access.
type Cluster struct {
	// Config and Client act as an administrator.
	Config *rest.Config
	Client client.Client
	env    *envtest.Environment
}

// Stack is a running target cluster and IronCore control plane.
type Stack struct {
	Options
	// Dir holds the kubeconfigs, the cloud-config and the server logs.
	Dir string
	// Binaries maps each server name to its binary.
	Binaries map[string]string
	// Target is the Kubernetes cluster the CCM serves.
	Target *Cluster
	// TargetClientset is an administrator clientset of the target cluster.
	TargetClientset kubernetes.Interface
	// IronCore is the IronCore control plane.
	IronCore *Cluster
	// Simulator stands in for IronCore's status writers.
	Simulator *simulator.Simulator
	// IronCoreProxy is the CCM's way to IronCore, and TargetProxy its way to the target
	// cluster; they count, log and can fail requests.
	IronCoreProxy, TargetProxy *apiproxy.Proxy
	// TargetAdminKubeconfig and IronCoreAdminKubeconfig are administrator kubeconfigs, for
	// kubectl; the IronCore one's context is the cluster's namespace.
	TargetAdminKubeconfig, IronCoreAdminKubeconfig string
	// CCMTargetKubeconfig and CCMIronCoreKubeconfig are the CCM's kubeconfigs, and
	// CloudConfig its cloud-config file.
	CCMTargetKubeconfig, CCMIronCoreKubeconfig, CloudConfig string
	// StartupDuration is how long Start took, excluding building binaries.
	StartupDuration time.Duration

	// ironcoreIdentity and targetIdentity are the CCM's identities, for further proxies.
	ironcoreIdentity, targetIdentity *rest.Config
	// ironcoreAccount and targetAccount are the CCM's ServiceAccounts.
	ironcoreAccount, targetAccount types.NamespacedName

	// logger writes the logs of the controller-runtime parts that run in this process
	// (envtest, the simulator) to simulator.log.
	logger logr.Logger

	// stopsMu guards stops: the two control planes start in parallel.
	stopsMu sync.Mutex
	stops   []func() error
}

// Start builds any missing binary and starts the whole stack. Call Stop when done.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	opts.setDefaults()
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	binaries, err := EnsureBinaries(ctx, root, opts.Progress)
	if err != nil {
		return nil, err
	}
	if err := ensureTargetAPIServer(ctx, root, binaries, opts.Progress); err != nil {
		return nil, err
	}
	if err := checkFreeSpace(os.TempDir(), stackSpace, "the stack's servers (etcd data, logs) in the temporary directory"); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", stackDirPattern)
	if err != nil {
		return nil, err
	}
	s := &Stack{Options: opts, Dir: dir, Binaries: binaries}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	markOwner(dir, opts.Purpose)
	if err := checkOtherRuns(os.TempDir(), dir, opts.Purpose != "", opts.Progress); err != nil {
		return nil, err
	}

	// controller-runtime's global logger must be set before envtest first logs: after 30 s
	// without one (the builds above take minutes), controller-runtime prints a warning with a
	// stack dump, which reads like a crash.
	logs, err := s.logFile("simulator.log")
	if err != nil {
		return nil, err
	}
	s.logger = funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix, args) }, funcr.Options{})
	ctrllog.SetLogger(s.logger)

	started := time.Now()
	fmt.Fprintf(opts.Progress, "starting the target cluster and the IronCore control plane...\n")
	group, groupCtx := errgroup.WithContext(ctx)
	group.Go(func() error { return s.startTarget() })
	group.Go(func() error { return s.startIronCore(groupCtx, root) })
	if err := group.Wait(); err != nil {
		return nil, err
	}
	if err := s.startSimulator(ctx); err != nil {
		return nil, err
	}
	if err := s.createIronCoreObjects(ctx); err != nil {
		return nil, err
	}
	if err := s.writeCCMFiles(ctx); err != nil {
		return nil, err
	}
	s.StartupDuration = time.Since(started)
	fmt.Fprintf(opts.Progress, "stack started in %s\n", s.StartupDuration.Round(100*time.Millisecond))
	return s, nil
}

// Stop stops everything Start started, in reverse order, and removes the stack's directory.
func (s *Stack) Stop() error {
	s.stopsMu.Lock()
	defer s.stopsMu.Unlock()
	var errs []error
	for i := len(s.stops) - 1; i >= 0; i-- {
		errs = append(errs, s.stops[i]())
	}
	s.stops = nil
	errs = append(errs, os.RemoveAll(s.Dir))
	return errors.Join(errs...)
}

func (s *Stack) onStop(stop func() error) {
	s.stopsMu.Lock()
	defer s.stopsMu.Unlock()
	s.stops = append(s.stops, stop)
}

// adminRateLimits lifts client-go's default of 5 requests per second for the stack's
// administrator clients, which tests use to poll for conditions.
func adminRateLimits(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = 1000, 2000
}

// newEnvironment prepares a control plane whose etcd data and certificates are in the stack's
// directory, so that its servers' command lines name it: a later run finds them by it if this
// one is killed before it could record them.
func (s *Stack) newEnvironment(scheme *runtime.Scheme, name, apiServer string) (*envtest.Environment, error) {
	dataDir, certDir := filepath.Join(s.Dir, name+"-etcd"), filepath.Join(s.Dir, name+"-certs")
	for _, dir := range []string{dataDir, certDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
	}
	env := &envtest.Environment{Scheme: scheme}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: s.Binaries["etcd"], DataDir: dataDir}
	env.ControlPlane.APIServer = &envtest.APIServer{Path: apiServer, CertDir: certDir}
	return env, nil
}

func (s *Stack) startTarget() error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	// The target cluster's API server may be of another minor version (TargetKubernetesEnv).
	env, err := s.newEnvironment(scheme, "target", s.Binaries[targetAPIServerKey])
	if err != nil {
		return err
	}
	// No node lifecycle controller runs here to lift the not-ready taint this plugin adds; the
	// fixtures set Node conditions themselves.
	env.ControlPlane.GetAPIServer().Configure().
		Append("disable-admission-plugins", "TaintNodesByCondition").
		Set("service-cluster-ip-range", "10.96.0.0/16,fd00:96::/108")
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start target cluster: %w", err)
	}
	s.onStop(env.Stop)
	recordTempDirs(s.Dir, env.WebhookInstallOptions.LocalServingCertDir)
	adminRateLimits(cfg)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s.Target = &Cluster{Config: cfg, Client: c, env: env}
	s.TargetClientset = clientset
	s.TargetAdminKubeconfig = filepath.Join(s.Dir, "target-admin.kubeconfig")
	return WriteKubeconfig(s.TargetAdminKubeconfig, cfg, "")
}

func (s *Stack) startIronCore(ctx context.Context, root string) error {
	scheme, err := ironcore.NewScheme()
	if err != nil {
		return err
	}
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiregistrationv1.AddToScheme, corev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	apiServices, err := ironcoreAPIServiceDir(ctx, root)
	if err != nil {
		return err
	}
	env, err := s.newEnvironment(scheme, "ironcore", s.Binaries["kube-apiserver"])
	if err != nil {
		return err
	}
	ext := &ironcoreenvtest.EnvironmentExtensions{
		APIServiceDirectoryPaths:       []string{apiServices},
		ErrorIfAPIServicePathIsMissing: true,
		AdditionalServices:             []ironcoreenvtest.AdditionalService{{Name: "controller-manager"}},
	}
	cfg, err := ironcoreenvtest.StartWithExtensions(env, ext)
	if err != nil {
		return fmt.Errorf("start IronCore kube-apiserver: %w", err)
	}
	recordTempDirs(s.Dir, env.WebhookInstallOptions.LocalServingCertDir,
		ext.APIServiceInstallOptions.ClientCertDir, ext.APIServiceInstallOptions.LocalServingCertDir)
	s.onStop(func() error {
		err := ironcoreenvtest.StopWithExtensions(env, ext)
		// The extensions leave their certificate directories behind.
		return errors.Join(err, os.RemoveAll(ext.APIServiceInstallOptions.ClientCertDir), os.RemoveAll(ext.APIServiceInstallOptions.LocalServingCertDir))
	})
	adminRateLimits(cfg)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	s.IronCore = &Cluster{Config: cfg, Client: c, env: env}

	logs, err := s.logFile("ironcore-apiserver.log")
	if err != nil {
		return err
	}
	apiServer, err := apiserver.New(cfg, apiserver.Options{
		Command:     []string{s.Binaries["ironcore-apiserver"]},
		ETCDServers: []string{env.ControlPlane.Etcd.URL.String()},
		Host:        ext.APIServiceInstallOptions.LocalServingHost,
		Port:        ext.APIServiceInstallOptions.LocalServingPort,
		CertDir:     ext.APIServiceInstallOptions.LocalServingCertDir,
		Stdout:      logs, Stderr: logs,
	})
	if err != nil {
		return err
	}
	if err := apiServer.Start(); err != nil {
		return fmt.Errorf("start ironcore-apiserver: %w", err)
	}
	s.onStop(apiServer.Stop)
	if err := ironcoreenvtest.WaitUntilAPIServicesReadyWithTimeout(2*time.Minute, ext, cfg, c, scheme); err != nil {
		return fmt.Errorf("wait for the IronCore API services: %w", err)
	}

	logs, err = s.logFile("ironcore-controller-manager.log")
	if err != nil {
		return err
	}
	host, port := ext.GetAdditionalServiceHostPort("controller-manager")
	controllerManager, err := controllermanager.New(cfg, controllermanager.Options{
		Command: []string{s.Binaries["ironcore-controller-manager"]},
		Args:    process.EmptyArgs().Set("controllers", "*"),
		Host:    host,
		Port:    port,
		Stdout:  logs, Stderr: logs,
	})
	if err != nil {
		return err
	}
	if err := controllerManager.Start(); err != nil {
		return fmt.Errorf("start ironcore-controller-manager: %w", err)
	}
	s.onStop(controllerManager.Stop)
	return s.startGarbageCollector(cfg)
}

// startGarbageCollector runs kube-controller-manager's garbage collector against IronCore,
// which deletes the objects IronCore ties to their owners by owner references (ephemeral
// NetworkInterfaces, Prefixes, VirtualIPs, LoadBalancerRoutings).
func (s *Stack) startGarbageCollector(cfg *rest.Config) error {
	s.IronCoreAdminKubeconfig = filepath.Join(s.Dir, "ironcore-admin.kubeconfig")
	if err := WriteKubeconfig(s.IronCoreAdminKubeconfig, cfg, s.Namespace); err != nil {
		return err
	}
	proc, err := StartProcess(s.Dir, "ironcore-garbage-collector", s.Binaries["kube-controller-manager"],
		"--kubeconfig="+s.IronCoreAdminKubeconfig,
		"--controllers=garbagecollector",
		"--leader-elect=false",
		"--secure-port=0",
		"--concurrent-gc-syncs=5",
	)
	if err != nil {
		return err
	}
	s.onStop(proc.Stop)
	return nil
}

func (s *Stack) startSimulator(ctx context.Context) error {
	mgr, err := ctrl.NewManager(s.IronCore.Config, ctrl.Options{
		Logger:                 s.logger,
		Scheme:                 s.IronCore.Client.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	sim, err := simulator.New(mgr)
	if err != nil {
		return err
	}
	sim.SetLatency(s.SimulatorLatency)
	s.Simulator = sim
	mgrCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	s.onStop(func() error {
		cancel()
		return <-done
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the simulator's cache did not sync")
	}
	return nil
}

// createIronCoreObjects creates what an IronCore tenant has before a cluster runs on it: the
// namespace, the cluster Network, address prefixes, a MachineClass and the MachinePools.
func (s *Stack) createIronCoreObjects(ctx context.Context) error {
	c := s.IronCore.Client
	namespace := &corev1.Namespace{}
	namespace.Name = s.Namespace
	network := &networkingv1alpha1.Network{}
	network.Namespace, network.Name = s.Namespace, s.Network
	class := &computev1alpha1.MachineClass{
		Capabilities: corev1alpha1.ResourceList{
			corev1alpha1.ResourceCPU:    resource.MustParse("4"),
			corev1alpha1.ResourceMemory: resource.MustParse("16Gi"),
		},
	}
	class.Name = MachineClass
	objects := []client.Object{namespace, network, class,
		rootPrefix(s.Namespace, NodePrefixV4, "10.0.0.0/16"),
		rootPrefix(s.Namespace, NodePrefixV6, "fd00:10::/64"),
		rootPrefix(s.Namespace, LoadBalancerPrefix, "10.1.0.0/16"),
		rootPrefix(s.Namespace, LoadBalancerPrefixV6, "fd00:20::/64"),
	}
	for _, obj := range objects {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	for name, topology := range Pools() {
		if err := s.Simulator.AddMachinePool(ctx, name, topology); err != nil {
			return err
		}
	}
	return nil
}

func rootPrefix(namespace, name, cidr string) *ipamv1alpha1.Prefix {
	prefix := &ipamv1alpha1.Prefix{}
	prefix.Namespace, prefix.Name = namespace, name
	prefix.Spec.Prefix = mustIPPrefix(cidr)
	return prefix
}

// writeCCMFiles writes the CCM's kubeconfigs and its cloud-config. The CCM authenticates on
// both sides as the ServiceAccounts of the manifests rendered from the Helm chart, bound only
// to the roles rendered with them, so every test proves those roles sufficient. The IronCore
// kubeconfig goes through IronCoreProxy, the target one through TargetProxy.
func (s *Stack) writeCCMFiles(ctx context.Context) error {
	targetIdentity, targetAccount, err := serviceAccountIdentity(ctx, s.Target, deploy.TargetManifests, "")
	if err != nil {
		return fmt.Errorf("the CCM's identity in the target cluster: %w", err)
	}
	ironcoreIdentity, ironcoreAccount, err := serviceAccountIdentity(ctx, s.IronCore, deploy.IronCoreRBAC, s.Namespace)
	if err != nil {
		return fmt.Errorf("the CCM's identity in IronCore: %w", err)
	}
	s.ironcoreIdentity, s.targetIdentity = ironcoreIdentity, targetIdentity
	s.ironcoreAccount, s.targetAccount = ironcoreAccount, targetAccount
	if s.IronCoreProxy, s.CCMIronCoreKubeconfig, err = s.StartIronCoreProxy("ccm"); err != nil {
		return err
	}
	if s.TargetProxy, s.CCMTargetKubeconfig, err = s.StartTargetProxy("ccm"); err != nil {
		return err
	}
	s.CloudConfig = filepath.Join(s.Dir, "cloud-config.yaml")
	return os.WriteFile(s.CloudConfig, []byte(s.cloudConfig("")), 0o600)
}

// StartTargetProxy starts another proxy to the target cluster with the CCM's identity, and
// writes a kubeconfig through it, <name>-target.kubeconfig, for --kubeconfig (and the
// authentication and authorization kubeconfigs): so that each of several CCM replicas has its
// own request log there too. The stack stops it.
func (s *Stack) StartTargetProxy(name string) (*apiproxy.Proxy, string, error) {
	proxy, err := apiproxy.Start(s.targetIdentity)
	if err != nil {
		return nil, "", err
	}
	s.onStop(proxy.Close)
	kubeconfig := filepath.Join(s.Dir, name+"-target.kubeconfig")
	return proxy, kubeconfig, WriteKubeconfig(kubeconfig, proxy.ClientConfig(), "")
}

// StartIronCoreProxy starts another proxy to IronCore with the CCM's identity, and writes a
// kubeconfig through it, <name>-ironcore.kubeconfig, for --ironcore-kubeconfig: so that each
// of several CCM replicas has its own request log. The stack stops it.
func (s *Stack) StartIronCoreProxy(name string) (*apiproxy.Proxy, string, error) {
	proxy, err := apiproxy.Start(s.ironcoreIdentity)
	if err != nil {
		return nil, "", err
	}
	s.onStop(proxy.Close)
	kubeconfig := filepath.Join(s.Dir, name+"-ironcore.kubeconfig")
	return proxy, kubeconfig, WriteKubeconfig(kubeconfig, proxy.ClientConfig(), s.Namespace)
}

// cloudConfig is the CCM's cloud-config for the stack, with extra lines appended.
func (s *Stack) cloudConfig(extra string) string {
	return fmt.Sprintf("networkName: %s\nprefixName: %s\nipv6PrefixName: %s\nclusterName: %s\n%s",
		s.Network, LoadBalancerPrefix, LoadBalancerPrefixV6, s.ClusterName, extra)
}

// WriteCloudConfig writes a cloud-config named name into the stack's directory: the stack's,
// with extra (YAML lines) appended, and returns its path, for --cloud-config.
func (s *Stack) WriteCloudConfig(name, extra string) (string, error) {
	path := filepath.Join(s.Dir, name+".cloud-config.yaml")
	return path, os.WriteFile(path, []byte(s.cloudConfig(extra)), 0o600)
}

// CreateRootPrefix creates a root Prefix (allocated by itself) with the labels.
func (s *Stack) CreateRootPrefix(ctx context.Context, name, cidr string, labels map[string]string) (*ipamv1alpha1.Prefix, error) {
	prefix := rootPrefix(s.Namespace, name, cidr)
	prefix.Labels = labels
	if err := s.IronCore.Client.Create(ctx, prefix); err != nil {
		return nil, fmt.Errorf("create Prefix %s: %w", name, err)
	}
	return prefix, nil
}

func (s *Stack) logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(s.Dir, name))
	if err != nil {
		return nil, err
	}
	s.onStop(f.Close)
	return f, nil
}

// ironcoreAPIServiceDir is where the ironcore module ships its APIService definitions.
func ironcoreAPIServiceDir(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/ironcore-dev/ironcore")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate the ironcore module: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "config", "apiserver", "apiservice", "bases"), nil
}
