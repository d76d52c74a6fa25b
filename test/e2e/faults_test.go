package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestAHungIronCoreRequestIsGivenUp has the IronCore API accept the writes of a new Service's
// LoadBalancer and never answer them. The CCM must give such a request up and try again: the
// service controller calls it without a deadline, and a worker waiting for good would leave the
// Service without an address after IronCore answers again.
func TestAHungIronCoreRequestIsGivenUp(t *testing.T) {
	startCCM(t, "ccm-hang")
	loadBalancerWrites := func(req apiproxy.Request) bool {
		return (req.Verb == "create" || req.Verb == "patch") && req.Resource == "loadbalancers.networking.ironcore.dev"
	}
	stack.IronCoreProxy.Reset()
	stack.IronCoreProxy.SetFaults(1, apiproxy.Fault{Kind: apiproxy.Hang, Rate: 1, Match: loadBalancerWrites})
	t.Cleanup(func() { stack.IronCoreProxy.SetFaults(0) })
	service := createService(t, "hung-write", testenv.ServiceOptions{})
	testenv.Await(t, context.Background(), waitTimeout, "a LoadBalancer write to hang", func(context.Context) error {
		if n := stack.IronCoreProxy.Injected()[apiproxy.Hang]; n == 0 {
			return fmt.Errorf("none hung yet")
		}
		return nil
	})
	stack.IronCoreProxy.SetFaults(0)
	answered := time.Now()
	waitForIngress(t, service, anyIngress)
	t.Logf("the Service got its address %s after IronCore answered again", time.Since(answered).Round(time.Millisecond))
}
