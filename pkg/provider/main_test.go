package provider_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// stack and cloud are shared by the package's tests: the stack starts once per package.
// recorder records events into the target cluster, as the CCM's recorder does.
var (
	stack    *testenv.Stack
	cloud    *provider.Cloud
	recorder record.EventRecorder
)

// testClusterID is the identity of the stack's cluster that the package's provider knows.
const testClusterID = "5e1f0000-0000-4000-8000-0000000000a1"

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if fuzzing() {
		// The fuzz targets are pure; the coordinator and each worker would otherwise start a
		// stack of their own.
		return m.Run()
	}
	return testenv.Run(&stack, func() int { return runWithStack(m) })
}

// runWithStack starts the package's recorder and provider on the stack and runs the tests.
func runWithStack(m *testing.M) int {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: stack.TargetClientset.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ironcore-cloud-controller-manager-test"})

	stop := make(chan struct{})
	defer close(stop)
	var err error
	cloud, err = startCloud(context.Background(), stop, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the cloud provider: %v\n", err)
		return 1
	}
	// As the CCM reads it at start-up: LoadBalancers are retained and taken over only with it.
	cloud.ClusterID().Set(testClusterID)
	return m.Run()
}

// startTestCloud starts a provider for the test as startCloud does, stopped when the test ends.
func startTestCloud(t *testing.T, modify func(*config.Options)) *provider.Cloud {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	c, err := startCloud(context.Background(), stop, modify)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startCloudWithInformers is startTestCloud on informers of the provider's own, set but not
// started; stop closes when the test ends.
func startCloudWithInformers(t *testing.T, modify func(*config.Options)) (*provider.Cloud, informers.SharedInformerFactory, <-chan struct{}) {
	t.Helper()
	c := startTestCloud(t, modify)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	setInformers(t, c, factory)
	return c, factory, stop
}

// explicitTargets makes a provider write its LoadBalancers' routings instead of selecting.
func explicitTargets(o *config.Options) { o.UseNICSelector = false }

// startCloud builds and initializes a provider from the stack's CCM configuration, with the
// options changed by modify if not nil. It reaches IronCore through the stack's proxy, so
// tests can count its requests and make the API fail.
// testOptions are the options of the package's providers: selector mode unless a test asks
// for explicit routings, as the providers of one stack must agree on it (an explicit one
// removes the target labels a selecting one writes).
func testOptions() *config.Options {
	options := config.NewOptions()
	options.IronCoreKubeconfig = stack.CCMIronCoreKubeconfig
	options.UseNICSelector = true
	return options
}

func startCloud(ctx context.Context, stop <-chan struct{}, modify func(*config.Options)) (*provider.Cloud, error) {
	options := testOptions()
	if modify != nil {
		modify(options)
	}
	c, err := provider.New(ctx, provider.Settings{
		CloudConfigPath: stack.CloudConfig,
		Options:         options,
		Recorder:        recorder,
	})
	if err != nil {
		return nil, err
	}
	initialize(c, stop)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.IronCore().WaitForCacheSync(syncCtx) {
		return nil, fmt.Errorf("the IronCore cache did not sync")
	}
	return c, nil
}

// initialize initializes the provider and runs its targets controller, as cmd builds and runs
// it; a test that gives the controller informers (targetsOf(c).Watch) does so before they
// start.
func initialize(c *provider.Cloud, stop <-chan struct{}) {
	config := lbtargets.ConfigFrom(c.Options(), c.CloudConfig())
	config.IronCore, config.Owners, config.Recorder = c.IronCore(), c.LoadBalancerOwners(), recorder
	targets := lbtargets.New(config)
	c.UseTargets(targets)
	c.Initialize(nil, stop)
	go targets.Run(wait.ContextForChannel(stop))
}

// setInformers gives the provider and its targets controller the informers, as the framework
// and cmd do, before they start.
func setInformers(t *testing.T, c *provider.Cloud, factory informers.SharedInformerFactory) {
	t.Helper()
	c.SetInformers(factory)
	if err := targetsOf(c).Watch(factory.Core().V1().Nodes(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices()); err != nil {
		t.Fatal(err)
	}
}

// targetsOf returns the targets controller startCloud built for the provider.
func targetsOf(c *provider.Cloud) *lbtargets.Controller {
	return c.LoadBalancerTargets().(*lbtargets.Controller)
}

func instancesV2(t *testing.T) cloudprovider.InstancesV2 {
	t.Helper()
	instances, ok := cloud.InstancesV2()
	if !ok {
		t.Fatal("InstancesV2 is not implemented")
	}
	return instances
}

// fuzzing tells whether go test runs a fuzz target (-fuzz), or is one of its workers.
func fuzzing() bool {
	fuzz := flag.Lookup("test.fuzz")
	worker := flag.Lookup("test.fuzzworker")
	return (fuzz != nil && fuzz.Value.String() != "") || (worker != nil && worker.Value.String() == "true")
}
