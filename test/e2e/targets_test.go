package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestTrafficGoesOnlyWhereItCanBeServed runs the binary in selector mode, with Node health on
// (the default): a Local Service's LoadBalancer gets a routing of its own that follows the
// Service's endpoints, and a Node NotReady past the grace period stops being a target of a
// Cluster Service, which selects by label, and comes back when Ready. The Local Service's
// LoadBalancer does not select, which is when IronCore v0.5.0 can miss target label changes
// of the selecting one.
func TestTrafficGoesOnlyWhereItCanBeServed(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-targets", "--use-nic-selector=true")
	names := []string{"targets-1", "targets-2", "targets-3"}
	for _, name := range names {
		worker(t, name)
	}

	local := createService(t, "targets-local", testenv.ServiceOptions{ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal})
	setEndpoints(t, local, names[1])
	waitForIngress(t, local, anyIngress)
	localLB := lbspec.Name(local)
	stack.WaitForRouting(t, waitTimeout, localLB, stack.NetworkInterfaceIPs(t, names[1]))
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: localLB}, lb); err != nil {
		t.Fatal(err)
	}
	if lb.Spec.NetworkInterfaceSelector != nil {
		t.Fatalf("the Local Service's LoadBalancer selects %v", lb.Spec.NetworkInterfaceSelector)
	}
	changed := time.Now()
	setEndpoints(t, local, names[0], names[2])
	stack.WaitForRouting(t, waitTimeout, localLB, stack.NetworkInterfaceIPs(t, names[0], names[2]))
	t.Logf("the routing followed an endpoint change in %s", time.Since(changed).Round(time.Millisecond))

	cluster := createService(t, "targets-cluster", testenv.ServiceOptions{})
	waitForIngress(t, cluster, anyIngress)
	clusterLB := lbspec.Name(cluster)
	for _, name := range names {
		waitForDestination(t, clusterLB, stack.NetworkInterfaceIPs(t, name)[0], true)
	}

	if _, err := stack.SetNodeReadySince(ctx, names[0], corev1.ConditionFalse, time.Now().Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitForDestination(t, clusterLB, stack.NetworkInterfaceIPs(t, names[0])[0], false)
	stack.WaitForRouting(t, waitTimeout, localLB, stack.NetworkInterfaceIPs(t, names[2]))
	waitForNodeEvent(t, names[0], lbtargets.ReasonTargetExcluded, "load balancer traffic")
	if _, err := stack.SetNodeReady(ctx, names[0], corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	waitForDestination(t, clusterLB, stack.NetworkInterfaceIPs(t, names[0])[0], true)
	stack.WaitForRouting(t, waitTimeout, localLB, stack.NetworkInterfaceIPs(t, names[0], names[2]))

	svc, err := stack.TargetClientset.CoreV1().Services(local.Namespace).Get(ctx, local.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ingress := range svc.Status.LoadBalancer.Ingress {
		if ingress.IPMode == nil || *ingress.IPMode != corev1.LoadBalancerIPModeVIP {
			t.Errorf("ingress %s has ipMode %v, want VIP", ingress.IP, ingress.IPMode)
		}
	}
}

// setEndpoints gives the Service one ready endpoint on each of the Nodes.
func setEndpoints(t *testing.T, service *corev1.Service, nodes ...string) {
	t.Helper()
	var endpoints []testenv.Endpoint
	for i, node := range nodes {
		endpoints = append(endpoints, testenv.Endpoint{IP: fmt.Sprintf("10.244.8.%d", i+1), Node: node, Ready: true, Serving: true})
	}
	if err := stack.SetEndpoints(context.Background(), service, endpoints); err != nil {
		t.Fatal(err)
	}
}

// waitForNodeEvent waits for an event with the reason on the Node whose message contains the
// text.
func waitForNodeEvent(t *testing.T, node, reason, containing string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "event "+reason+" on Node "+node, func(ctx context.Context) error {
		events, err := stack.TargetClientset.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason,
		})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(events.Items, func(event corev1.Event) bool { return strings.Contains(event.Message, containing) }) {
			return fmt.Errorf("%d with the reason, none containing %q", len(events.Items), containing)
		}
		return nil
	})
}
