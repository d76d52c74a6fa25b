package ironcore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestHandlersAreAddedWithoutWaitingForIronCore starts the cache while the IronCore API fails,
// as when IronCore goes away between the CCM's start-up checks and its controllers' start:
// adding change handlers must not wait for the cache to sync, and the handlers must see
// changes once IronCore is back.
func TestHandlersAreAddedWithoutWaitingForIronCore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	options := config.NewOptions()
	options.IronCoreKubeconfig = stack.CCMIronCoreKubeconfig
	cfg, namespace, err := options.IronCoreRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := ironcore.New(cfg, namespace)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterInformers(ctx); err != nil {
		t.Fatal(err)
	}

	setProxyMode(t, apiproxy.Fail)
	stack.IronCoreProxy.Reset()
	go func() { _ = client.Start(ctx) }()
	// The cache has started once its informers try to list (a watch that lists, with
	// client-go's watch-list).
	testenv.Await(t, ctx, time.Minute, "the cache to list Machines", func(context.Context) error {
		for _, count := range stack.IronCoreProxy.Counts() {
			if (count.Verb == "list" || count.Verb == "watch") && count.Resource == "machines.compute.ironcore.dev" {
				return nil
			}
		}
		return fmt.Errorf("requests %v", stack.IronCoreProxy.Counts())
	})

	var mu sync.Mutex
	seen := map[string]bool{}
	record := func(kind, name string) {
		mu.Lock()
		defer mu.Unlock()
		seen[kind+"/"+name] = true
	}
	added := make(chan error, 1)
	go func() {
		added <- errors.Join(
			client.OnMachineChange(func(m *computev1alpha1.Machine) { record("Machine", m.Name) }),
			client.OnNetworkInterfaceChange(func(n *networkingv1alpha1.NetworkInterface) { record("NetworkInterface", n.Name) }),
		)
	}()
	select {
	case err := <-added:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("adding change handlers waits for the cache to sync while IronCore fails")
	}

	setProxyMode(t, apiproxy.Forward)
	stack.CreateMachineForTest(t, "handled", testenv.MachineOptions{})
	want := []string{"Machine/handled", "NetworkInterface/" + testenv.NetworkInterfaceName("handled")}
	testenv.Await(t, ctx, 2*time.Minute, "the handlers to see the new Machine and its interface", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		for _, key := range want {
			if !seen[key] {
				return fmt.Errorf("%s not seen", key)
			}
		}
		return nil
	})
}
