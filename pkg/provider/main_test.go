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
// cloud has no load balancer targets controller: a test that ensures load balancers starts a
// provider of its own (testCloud). recorder records events into the target cluster, as the
// CCM's recorder does.
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
	cloud, err = newCloud(context.Background(), stop, settingsWith(nil))
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the cloud provider: %v\n", err)
		return 1
	}
	// As the CCM reads it at start-up.
	cloud.ClusterID().Set(testClusterID)
	return m.Run()
}

// startTestCloud starts a provider for the test with its targets controller on informers of
// the target cluster, started and synced; it stops when the test ends.
func startTestCloud(t *testing.T, modify func(*config.Options)) *provider.Cloud {
	t.Helper()
	return startTargets(t, modify).cloud
}

// testCloud is the provider of a test that ensures load balancers, stopped when the test ends:
// selector mode, and the cluster's identity known as the CCM reads it at start-up
// (LoadBalancers are retained and taken over only with it). Each such test has its own, as
// its targets controller follows every Node and Service of the cluster, which the test's are
// alone while it runs: the package's tests do not run in parallel.
func testCloud(t *testing.T) *provider.Cloud {
	t.Helper()
	c := startTestCloud(t, nil)
	c.ClusterID().Set(testClusterID)
	return c
}

// startCloudWithInformers is a provider with its targets controller, as startTestCloud builds
// it, on informers that are set but not started; stop closes when the test ends.
func startCloudWithInformers(t *testing.T, modify func(*config.Options)) (*provider.Cloud, informers.SharedInformerFactory, <-chan struct{}) {
	t.Helper()
	return startWithInformers(t, settingsWith(modify))
}

// startWithInformers is startCloudWithInformers with the provider's settings.
func startWithInformers(t *testing.T, settings provider.Settings) (*provider.Cloud, informers.SharedInformerFactory, <-chan struct{}) {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	c, err := newCloud(context.Background(), stop, settings)
	if err != nil {
		t.Fatal(err)
	}
	factory, err := runTargets(c, stop)
	if err != nil {
		t.Fatal(err)
	}
	return c, factory, stop
}

// explicitTargets makes a provider write its LoadBalancers' routings instead of selecting.
func explicitTargets(o *config.Options) { o.UseNICSelector = false }

// testOptions are the options of the package's providers: selector mode unless a test asks
// for explicit routings.
func testOptions() *config.Options {
	options := config.NewOptions()
	options.IronCoreKubeconfig = stack.CCMIronCoreKubeconfig
	options.UseNICSelector = true
	return options
}

// settingsWith are the settings of a provider from the stack's CCM configuration, with the
// options changed by modify if not nil. It reaches IronCore through the stack's proxy, so
// tests can count its requests and make the API fail.
func settingsWith(modify func(*config.Options)) provider.Settings {
	options := testOptions()
	if modify != nil {
		modify(options)
	}
	return provider.Settings{CloudConfigPath: stack.CloudConfig, Options: options, Recorder: recorder}
}

// newCloud builds and initializes a provider, and waits for its IronCore cache. Its load
// balancers have no targets controller (runTargets gives them one).
func newCloud(ctx context.Context, stop <-chan struct{}, settings provider.Settings) (*provider.Cloud, error) {
	c, err := provider.New(ctx, settings)
	if err != nil {
		return nil, err
	}
	c.Initialize(nil, stop)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !c.IronCore().WaitForCacheSync(syncCtx) {
		return nil, fmt.Errorf("the IronCore cache did not sync")
	}
	return c, nil
}

// runTargets gives the provider informers of the target cluster and runs its targets
// controller on them, as the framework and cmd do; it returns the informers, not started.
func runTargets(c *provider.Cloud, stop <-chan struct{}) (informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	c.SetInformers(factory)
	config := lbtargets.ConfigFrom(c.Options(), c.CloudConfig())
	config.IronCore, config.Owners, config.Recorder = c.IronCore(), c.LoadBalancerOwners(), recorder
	config.Nodes, config.Services, config.EndpointSlices = factory.Core().V1().Nodes(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices()
	targets, err := lbtargets.New(config)
	if err != nil {
		return nil, err
	}
	c.UseTargets(targets)
	go targets.Run(wait.ContextForChannel(stop))
	return factory, nil
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
