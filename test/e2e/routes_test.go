package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// routeArgs turn on routes, with both IP families in the cluster CIDR.
func routeArgs() []string {
	args := []string{"--configure-cloud-routes=true", "--cluster-cidr=10.244.0.0/16,fd00:244::/56"}
	// IRONCORE_CCM_ROUTE_ARGS adds flags, to compare route controller settings by hand.
	if extra := os.Getenv("IRONCORE_CCM_ROUTE_ARGS"); extra != "" {
		args = append(args, strings.Fields(extra)...)
	}
	return args
}

func podCIDRs(i int) []string {
	return []string{fmt.Sprintf("10.244.%d.0/24", i), fmt.Sprintf("fd00:244:0:%x::/64", i)}
}

// nicPrefixes returns the literal prefixes of the Machine's NetworkInterface.
func nicPrefixes(ctx context.Context, machine string) ([]string, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}, nic); err != nil {
		return nil, err
	}
	var prefixes []string
	for _, source := range nic.Spec.Prefixes {
		if source.Value != nil {
			prefixes = append(prefixes, source.Value.String())
		}
	}
	slices.Sort(prefixes)
	return prefixes, nil
}

// TestRoutesOfTwentyDualStackNodes registers 20 dual-stack Nodes with pod CIDRs and waits
// until all 40 CIDRs are prefixes of the right NetworkInterfaces and every Node's
// NetworkUnavailable condition is cleared; then deletes a Node and waits for its routes to go.
func TestRoutesOfTwentyDualStackNodes(t *testing.T) {
	ctx := context.Background()
	ccm := startCCM(t, "ccm-routes", routeArgs()...)
	const count = 20
	names := runningMachines(t, "routed", count, testenv.MachineOptions{DualStack: true})
	if t.Failed() {
		return
	}

	started := time.Now()
	for i, name := range names {
		createNode(t, name, testenv.NodeOptions{PodCIDRs: podCIDRs(i + 1)})
	}
	testenv.Await(t, ctx, 2*waitTimeout, "all pod CIDRs routed and every Node's network available", func(ctx context.Context) error {
		for i, name := range names {
			prefixes, err := nicPrefixes(ctx, name)
			if err != nil {
				return err
			}
			if want := podCIDRs(i + 1); !slices.Equal(prefixes, want) {
				return fmt.Errorf("NetworkInterface of %s has prefixes %v, want %v", name, prefixes, want)
			}
			node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !networkAvailable(node) {
				return fmt.Errorf("Node %s: network still unavailable", name)
			}
		}
		return nil
	})
	t.Logf("all %d pod CIDRs of %d Nodes routed, and their networks available, %s after the Nodes were created", 2*count, count, time.Since(started).Round(time.Millisecond))

	// In a steady cluster, reconciling routes writes nothing to IronCore: let the route
	// controller pass over every route twice more, and count the writes meanwhile.
	stack.IronCoreProxy.Reset()
	keptBefore := strings.Count(readLog(ccm), `: "keep"`)
	testenv.Await(t, ctx, waitTimeout, "two more route reconciles", func(context.Context) error {
		if kept := strings.Count(readLog(ccm), `: "keep"`) - keptBefore; kept < 2*2*count {
			return fmt.Errorf("%d routes kept so far", kept)
		}
		return nil
	})
	for _, c := range stack.IronCoreProxy.Counts() {
		if !slices.Contains([]string{"get", "list", "watch"}, c.Verb) {
			t.Errorf("steady state: %d %s requests on %s", c.N, c.Verb, c.Resource)
		}
	}

	// A deleted Node's routes are removed.
	deleted := time.Now()
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, names[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, waitTimeout, "the deleted Node's routes to go", func(ctx context.Context) error {
		prefixes, err := nicPrefixes(ctx, names[0])
		if err != nil {
			return err
		}
		if len(prefixes) > 0 {
			return fmt.Errorf("prefixes %v", prefixes)
		}
		return nil
	})
	t.Logf("the deleted Node's routes were removed %s after", time.Since(deleted).Round(time.Millisecond))
	if prefixes, err := nicPrefixes(ctx, names[1]); err != nil || !slices.Equal(prefixes, podCIDRs(2)) {
		t.Fatalf("another Node's prefixes changed: %v, %v", prefixes, err)
	}
}

// networkAvailable reports whether the route controller cleared the Node's NetworkUnavailable.
func networkAvailable(node *corev1.Node) bool {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeNetworkUnavailable {
			return condition.Status == corev1.ConditionFalse
		}
	}
	return false
}
