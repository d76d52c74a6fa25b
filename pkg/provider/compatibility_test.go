package provider_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

// TestAPublicServiceWithLoadBalancerIPKeepsWorking: the reference CCM ignored
// spec.loadBalancerIP, so Services that have it must still get a Public LoadBalancer, with
// one event, not a failed sync on every pass.
func TestAPublicServiceWithLoadBalancerIPKeepsWorking(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-public-ip-1")
	service := createService(t, "public-ip", testenv.ServiceOptions{LoadBalancerIP: "203.0.113.10"})
	status := ensureUntilReady(t, lbs, service, nodes)
	if ips := ingressIPs(status); len(ips) != 1 || ips[0] == "203.0.113.10" {
		t.Fatalf("ingress %v, want one address of IronCore's choosing", ips)
	}
	for range 3 {
		ensureUntilReady(t, lbs, service, nodes)
	}
	waitForEvent(t, service, provider.ReasonLoadBalancerIPIgnored)
	requireRecordedOnce(t, service, provider.ReasonLoadBalancerIPIgnored)
}

// TestEventsAboutIgnoredFieldsAreRecordedOncePerChange syncs a Service many times, as the
// service controller does while IronCore works, and expects each event once, and again only
// when the Service changes.
func TestEventsAboutIgnoredFieldsAreRecordedOncePerChange(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-once-1")
	service := createService(t, "once", testenv.ServiceOptions{})
	service.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	for range 5 {
		status := ensureUntilReady(t, lbs, service, nodes)
		// What the event claims: the ingress is an address kube-proxy handles (not ipMode
		// Proxy), so kube-proxy on the Nodes enforces the source ranges.
		for _, ingress := range status.Ingress {
			if ingress.IPMode != nil && *ingress.IPMode != corev1.LoadBalancerIPModeVIP {
				t.Fatalf("ingress %s has ipMode %s; kube-proxy would not filter its traffic", ingress.IP, *ingress.IPMode)
			}
		}
	}
	waitForEvent(t, service, provider.ReasonSourceRangesOnNodes)
	requireRecordedOnce(t, service, provider.ReasonSourceRangesOnNodes)

	service.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "192.0.2.0/24"}
	if _, err := lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes); err != nil {
		t.Fatal(err)
	}
	waitForEventCount(t, service, provider.ReasonSourceRangesOnNodes, 2)
}

// TestAnAdoptedInternalLoadBalancerKeepsItsAddress: a requested address applies to a new
// LoadBalancer; an existing Internal one never changes its address because of it.
func TestAnAdoptedInternalLoadBalancerKeepsItsAddress(t *testing.T) {
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, "lb-keep-ip-1")
	service := createService(t, "keep-ip", testenv.ServiceOptions{Annotations: map[string]string{keys.AnnotationInternalLoadBalancer: "true"}})
	before := referenceLoadBalancer(t, lbspec.Name(service), stack.ClusterName, service, true, c)
	service.Spec.LoadBalancerIP = "10.99.0.7"
	status := ensureUntilReady(t, lbs, service, nodes)
	if ips := ingressIPs(status); len(ips) != 1 || ips[0] != before.Status.IPs[0].String() {
		t.Fatalf("ingress %v, want the address it had: %v", ips, before.Status.IPs)
	}
	after := ironcoreLoadBalancer(t, before.Name)
	if after.UID != before.UID || len(after.Status.IPs) != 1 || after.Status.IPs[0] != before.Status.IPs[0] {
		t.Fatalf("LoadBalancer changed: UID %s -> %s, IPs %v -> %v", before.UID, after.UID, before.Status.IPs, after.Status.IPs)
	}
	waitForEvent(t, service, provider.ReasonLoadBalancerIPKept)
}

// TestNodesThatCannotBeTargetsDoNotFailUpdates: Nodes of another provider or IronCore
// namespace, and a Node whose Machine was just deleted, are left out of the targets without
// failing UpdateLoadBalancer, which the service controller would otherwise retry for every
// Service on every node sync.
func TestNodesThatCannotBeTargetsDoNotFailUpdates(t *testing.T) {
	ctx := context.Background()
	lbs := loadBalancerOf(t, testCloud(t))
	// Registered before the eligible Node: the Node informer, which delivers in order, has
	// them by the time it has that one, whose routing shows a sync that saw them all.
	var nodes []*corev1.Node
	for name, providerID := range map[string]string{
		"other-cloud": "aws:///eu-west-1a/i-0123456789", "other-namespace": "ironcore://elsewhere/m-1",
		"machine-gone": providerIDOf("lb-quiet-no-such-machine"),
	} {
		nodes = append(nodes, stack.CreateNodeForTest(t, name, testenv.NodeOptions{ProviderID: providerID}))
	}
	nodes = append(nodes, workerNodes(t, "lb-quiet-1")...)
	service := createService(t, "quiet", testenv.ServiceOptions{})
	ensureUntilReady(t, lbs, service, nodes)
	for range 3 {
		if err := updated(lbs.UpdateLoadBalancer(ctx, "kubernetes", service, nodes)); err != nil {
			t.Fatalf("UpdateLoadBalancer: %v", err)
		}
	}
	if !hasTargetLabel(t, "lb-quiet-1") {
		t.Fatal("the eligible Node is not a target")
	}
}

// requireRecordedOnce fails unless exactly one event with the reason was recorded on the
// Service, counting repetitions the recorder folded into one event.
func requireRecordedOnce(t *testing.T, service *corev1.Service, reason string) {
	t.Helper()
	// The recorder writes events in order: once this one is in, every earlier one is.
	recorder.Event(service, corev1.EventTypeNormal, "TestFlush", reason)
	waitForEvent(t, service, "TestFlush")
	if count := eventCount(t, service, reason); count != 1 {
		t.Fatalf("event %s was recorded %d times, want once", reason, count)
	}
}

func waitForEventCount(t *testing.T, service *corev1.Service, reason string, want int32) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "event "+reason, func(context.Context) error {
		if count := eventCount(t, service, reason); count != want {
			return fmt.Errorf("recorded %d times, want %d", count, want)
		}
		return nil
	})
}

func eventCount(t *testing.T, service *corev1.Service, reason string) int32 {
	t.Helper()
	events, err := stack.TargetClientset.CoreV1().Events(service.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.uid": string(service.UID), "reason": reason}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var count int32
	for _, event := range events.Items {
		count += max(event.Count, 1)
	}
	return count
}

// TestAFailedTargetLabelWriteIsRetried: a Node becomes eligible while IronCore refuses every
// request; the label write that fails is retried by the label reconciler's queue once IronCore
// answers again, with no further call or event.
func TestAFailedTargetLabelWriteIsRetried(t *testing.T) {
	ctx := context.Background()
	h := startTargets(t, nil)
	nodes := workerNodes(t, "lb-retry-1", "lb-retry-2")
	taintNode(t, "lb-retry-2")
	h.waitForNodesInLister(t, nodes)
	service := createService(t, "label-retry", testenv.ServiceOptions{})
	ensureUntilReady(t, h.lbs, service, nodes)
	waitForNICLabel(t, "lb-retry-1", true)
	// The Node was created untainted: it may have been labelled before its taint was seen.
	waitForNICLabel(t, "lb-retry-2", false)

	stack.IronCoreProxy.Reset()
	setProxyMode(t, apiproxy.Fail)
	untaintNode(t, "lb-retry-2")
	testenv.Await(t, ctx, waitTimeout, "a refused write of the target label", func(context.Context) error {
		for _, count := range stack.IronCoreProxy.Counts() {
			if count.Verb == "patch" && count.Resource == "networkinterfaces.networking.ironcore.dev" {
				return nil
			}
		}
		return errors.New("no write of a NetworkInterface yet")
	})
	if hasTargetLabel(t, "lb-retry-2") {
		t.Fatal("the target label was written while IronCore refused every request")
	}
	if err := stack.IronCoreProxy.SetMode(apiproxy.Forward); err != nil {
		t.Fatal(err)
	}
	waitForNICLabel(t, "lb-retry-2", true)
}

// TestANewServiceCostsNoLoadBalancerReads: the cache answers whether a Service has a
// LoadBalancer; a new Service costs writes, not a GET that finds nothing.
func TestANewServiceCostsNoLoadBalancerReads(t *testing.T) {
	lbs := loadBalancerOf(t, testCloud(t))
	nodes := workerNodes(t, "lb-no-reads-1")
	service := createService(t, "no-reads", testenv.ServiceOptions{})
	stack.IronCoreProxy.Reset()
	ensureUntilReady(t, lbs, service, nodes)
	for _, count := range stack.IronCoreProxy.Counts() {
		if count.Verb == "get" && count.Resource == "loadbalancers.networking.ironcore.dev" {
			t.Fatalf("provisioning a new Service read LoadBalancers from the API server %d times", count.N)
		}
	}
}
