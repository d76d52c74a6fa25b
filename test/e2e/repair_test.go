package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbrepair"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// TestALoadBalancerDeletedOutOfBandIsRecreated deletes a Service's IronCore LoadBalancer
// behind the CCM's back, with no change to the Service or the Nodes, and expects a new one,
// with its address in the Service's status, within seconds.
func TestALoadBalancerDeletedOutOfBandIsRecreated(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-recreate")
	worker(t, "recreate-1")
	service := createService(t, "recreate", testenv.ServiceOptions{})
	before := waitForIngress(t, service, anyIngress)
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbspec.Name(service)}, lb); err != nil {
		t.Fatal(err)
	}

	deleted := time.Now()
	if err := stack.IronCore.Client.Delete(ctx, lb); err != nil {
		t.Fatal(err)
	}
	var after []string
	testenv.Await(t, ctx, waitTimeout, "a new LoadBalancer with its address in the Service", func(ctx context.Context) error {
		current := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), current); err != nil {
			return err
		}
		if current.UID == lb.UID || len(current.Status.IPs) == 0 {
			return errors.New("not recreated yet")
		}
		svc, err := stack.TargetClientset.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		after = testenv.IngressIPs(svc)
		if !slices.Equal(after, []string{current.Status.IPs[0].String()}) {
			return fmt.Errorf("Service ingress %v, LoadBalancer %v", after, current.Status.IPs)
		}
		return nil
	})
	t.Logf("recreated %s after it was deleted: ingress %v -> %v", time.Since(deleted).Round(time.Millisecond), before, after)
	waitForServiceEvent(t, service.Namespace, service.Name, lbrepair.ReasonRecreated)
}

// TestAPendingNetworkInterfaceBecomesATargetAgain, with routings written by the CCM: a
// NetworkInterface that loses its addresses for a while (Pending, as apinetlet reports it)
// leaves the routing and comes back when it is Available again, with no change to any Node
// or Service.
func TestAPendingNetworkInterfaceBecomesATargetAgain(t *testing.T) {
	ctx := context.Background()
	startCCM(t, "ccm-pending", "--use-nic-selector=false")
	worker(t, "pending-1")
	worker(t, "pending-2")
	service := createService(t, "pending", testenv.ServiceOptions{})
	waitForIngress(t, service, anyIngress)
	lbName := lbspec.Name(service)
	ip := stack.NetworkInterfaceIPs(t, "pending-2")[0]
	waitForDestination(t, lbName, ip, true)

	nic := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName("pending-2")}, nic); err != nil {
		t.Fatal(err)
	}
	stack.Simulator.Hold(nic)
	pending := []byte(`{"status":{"state":"Pending","ips":null,"prefixes":null,"virtualIP":null}}`)
	if err := stack.IronCore.Client.Status().Patch(ctx, nic, client.RawPatch(types.MergePatchType, pending)); err != nil {
		stack.Simulator.Release(nic)
		t.Fatal(err)
	}
	waitForDestination(t, lbName, ip, false)
	stack.Simulator.Release(nic)
	released := time.Now()
	waitForDestination(t, lbName, ip, true)
	t.Logf("the NetworkInterface was a target again %s after its provider reported it Available", time.Since(released).Round(time.Millisecond))
}

func waitForDestination(t *testing.T, lbName, ip string, want bool) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, fmt.Sprintf("%s as a destination of %s: %v", ip, lbName, want), func(ctx context.Context) error {
		routing := &networkingv1alpha1.LoadBalancerRouting{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: lbName}, routing); err != nil {
			return err
		}
		has := slices.ContainsFunc(routing.Destinations, func(d networkingv1alpha1.LoadBalancerDestination) bool { return d.IP.String() == ip })
		if has != want {
			return fmt.Errorf("destinations %v", routing.Destinations)
		}
		return nil
	})
}

// waitForServiceEvent waits for an event with the reason on the Service.
func waitForServiceEvent(t *testing.T, namespace, name, reason string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "event "+reason+" on Service "+name, func(context.Context) error {
		if len(serviceEvents(t, namespace, name, reason)) == 0 {
			return errors.New("none yet")
		}
		return nil
	})
}

// serviceEvents lists the messages of the Service's events with the reason.
func serviceEvents(t *testing.T, namespace, name, reason string) []string {
	t.Helper()
	events, err := stack.TargetClientset.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Service,involvedObject.name=" + name + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	var messages []string
	for _, event := range events.Items {
		messages = append(messages, event.Message)
	}
	return messages
}
