package provider_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// stack and cloud are shared by the package's tests: the stack starts once per package.
var (
	stack *testenv.Stack
	cloud *provider.Cloud
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx := context.Background()
	var err error
	stack, err = testenv.Start(ctx, testenv.Options{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the test stack: %v\n", err)
		return 1
	}
	defer func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the test stack: %v\n", err)
		}
	}()
	cloud, err = newCloud(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "build the cloud provider: %v\n", err)
		return 1
	}
	stop := make(chan struct{})
	defer close(stop)
	cloud.Initialize(nil, stop)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cloud.IronCore().WaitForCacheSync(syncCtx) {
		fmt.Fprintln(os.Stderr, "the IronCore cache did not sync")
		return 1
	}
	return m.Run()
}

// newCloud builds a provider from the stack's CCM configuration: it reaches IronCore through
// the stack's proxy, so tests can count its requests and make the API fail.
func newCloud(ctx context.Context) (*provider.Cloud, error) {
	options := config.NewOptions()
	options.IronCoreKubeconfig = stack.CCMIronCoreKubeconfig
	return provider.New(ctx, provider.Settings{
		CloudConfigPath: stack.CloudConfig,
		Options:         options,
	})
}

func instancesV2(t *testing.T) cloudprovider.InstancesV2 {
	t.Helper()
	instances, ok := cloud.InstancesV2()
	if !ok {
		t.Fatal("InstancesV2 is not implemented")
	}
	return instances
}
