package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// TestProxyInjectsFaults reads the cluster Network through the IronCore proxy with each fault
// injected into every such read, and checks what the client sees; then a share of the reads,
// and that the proxy counted exactly the failures the client saw.
func TestProxyInjectsFaults(t *testing.T) {
	ctx := context.Background()
	stack := startForTest(t)
	scheme, err := ironcore.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := stack.IronCoreProxy.ClientConfig()
	cfg.QPS, cfg.Burst = 1000, 1000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	readNetwork := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return c.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: stack.Network}, &networkingv1alpha1.Network{})
	}
	networks := func(req apiproxy.Request) bool {
		return req.Verb == "get" && req.Resource == "networks.networking.ironcore.dev"
	}
	if err := readNetwork(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		kind  apiproxy.FaultKind
		check func(error) bool
	}{
		{apiproxy.ServerError, apierrors.IsInternalError},
		{apiproxy.Conflict, apierrors.IsConflict},
		{apiproxy.Invalid, apierrors.IsInvalid},
		{apiproxy.Reset, func(err error) bool { var status apierrors.APIStatus; return err != nil && !errors.As(err, &status) }},
		{apiproxy.Hang, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{apiproxy.Slow, func(err error) bool { return err == nil }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			stack.IronCoreProxy.Reset()
			stack.IronCoreProxy.SetFaults(1, apiproxy.Fault{Kind: tc.kind, Rate: 1, Match: networks, Delay: time.Millisecond})
			defer stack.IronCoreProxy.SetFaults(0)
			// A hang is seen as the client's own deadline, which is short to keep the test
			// short; the other reads go through kube-apiserver and etcd, as slow as the machine.
			timeout := 10 * time.Second
			if tc.kind == apiproxy.Hang {
				timeout = 500 * time.Millisecond
			}
			if err := readNetwork(timeout); !tc.check(err) {
				t.Errorf("with %s injected, the read returned %v", tc.kind, err)
			}
			if n := stack.IronCoreProxy.Injected()[tc.kind]; n != 1 {
				t.Errorf("%s injected %d times, want 1", tc.kind, n)
			}
			// Requests the fault does not match pass.
			if err := c.List(ctx, &networkingv1alpha1.NetworkList{}, client.InNamespace(stack.Namespace)); err != nil {
				t.Errorf("a list of Networks, which %s does not match: %v", tc.kind, err)
			}
		})
	}

	t.Run("a share", func(t *testing.T) {
		stack.IronCoreProxy.Reset()
		stack.IronCoreProxy.SetFaults(7, apiproxy.Fault{Kind: apiproxy.ServerError, Rate: 0.5, Match: networks})
		defer stack.IronCoreProxy.SetFaults(0)
		failed := 0
		for range 100 {
			if err := readNetwork(10 * time.Second); err != nil {
				if !apierrors.IsInternalError(err) {
					t.Fatalf("unexpected error: %v", err)
				}
				failed++
			}
		}
		if injected := stack.IronCoreProxy.Injected()[apiproxy.ServerError]; injected != failed || failed < 25 || failed > 75 {
			t.Errorf("%d of 100 reads failed and %d failures were injected; want the same number, about half", failed, injected)
		}
	})
}
