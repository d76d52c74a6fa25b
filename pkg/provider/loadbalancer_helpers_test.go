package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/pkg/provider"
)

func loadBalancerOf(t *testing.T, c *provider.Cloud) cloudprovider.LoadBalancer {
	t.Helper()
	lbs, ok := c.LoadBalancer()
	if !ok {
		t.Fatal("LoadBalancer is not implemented")
	}
	return lbs
}

// createService creates a Service of type LoadBalancer, deleted when the test ends with the
// IronCore LoadBalancer the provider made for it: no service controller runs here to delete
// it, and every LoadBalancer left selecting would be recomputed by IronCore on each target
// change of the tests that follow.
func createService(t *testing.T, name string, opts testenv.ServiceOptions) *corev1.Service {
	t.Helper()
	service, err := stack.CreateLoadBalancerService(context.Background(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = stack.TargetClientset.CoreV1().Services(service.Namespace).Delete(ctx, service.Name, metav1.DeleteOptions{})
		lb := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(service)}}
		_ = stack.IronCore.Client.Delete(ctx, lb)
	})
	return service
}

// workerNodes creates running Machines (workerMachine) and their Nodes, initialized (with
// provider IDs) and Ready, and returns the Nodes, which the service controller would pass.
func workerNodes(t *testing.T, names ...string) []*corev1.Node {
	t.Helper()
	var nodes []*corev1.Node
	for _, name := range names {
		workerMachine(t, name)
		nodes = append(nodes, stack.CreateNodeForTest(t, name, testenv.NodeOptions{ProviderID: providerIDOf(name)}))
	}
	return nodes
}

// workerMachine creates a running Machine for a worker Node, its NetworkInterface labelled as
// the cluster-label controller (not running in these tests) would label it.
func workerMachine(t *testing.T, name string) {
	t.Helper()
	createMachine(t, name, testenv.MachineOptions{})
	labelForCluster(t, name)
}

// excludeNodes labels the Nodes to be excluded from load balancers, as an administrator does,
// or removes the label.
func excludeNodes(t *testing.T, excluded bool, names ...string) {
	t.Helper()
	value := "null"
	if excluded {
		value = `"true"`
	}
	patch := []byte(`{"metadata":{"labels":{"` + corev1.LabelNodeExcludeBalancers + `":` + value + `}}}`)
	for _, name := range names {
		if _, err := stack.TargetClientset.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// ensureUntilReady calls EnsureLoadBalancer, as the service controller does, until it stops
// asking to retry. Any other error fails the test.
func ensureUntilReady(t *testing.T, lbs cloudprovider.LoadBalancer, service *corev1.Service, nodes []*corev1.Node) *corev1.LoadBalancerStatus {
	t.Helper()
	var status *corev1.LoadBalancerStatus
	testenv.Await(t, context.Background(), waitTimeout, "EnsureLoadBalancer to report addresses", func(ctx context.Context) error {
		var err error
		status, err = lbs.EnsureLoadBalancer(ctx, "kubernetes", service, nodes)
		var retry *api.RetryError
		if errors.As(err, &retry) {
			return err
		}
		if err != nil {
			t.Fatalf("EnsureLoadBalancer: %v", err)
		}
		return nil
	})
	return status
}

func ironcoreLoadBalancer(t *testing.T, name string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{}
	if err := stack.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb); err != nil {
		t.Fatal(err)
	}
	return lb
}

func ingressIPs(status *corev1.LoadBalancerStatus) []string {
	var ips []string
	for _, ingress := range status.Ingress {
		ips = append(ips, ingress.IP)
	}
	return ips
}

// waitForEvent waits for an event with the reason on the Service, and returns its message.
func waitForEvent(t *testing.T, service *corev1.Service, reason string) string {
	t.Helper()
	message, err := stack.WaitForEvent(context.Background(), waitTimeout, service, reason)
	if err != nil {
		t.Fatal(err)
	}
	return message
}

// waitForEventText waits for an event the field selector selects whose message contains text.
func waitForEventText(t *testing.T, namespace, selector, what, text string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, what, func(ctx context.Context) error {
		events, err := stack.TargetClientset.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return err
		}
		for _, event := range events.Items {
			if strings.Contains(event.Message, text) {
				return nil
			}
		}
		return errors.New("none yet")
	})
}

// writes counts the requests to IronCore since the last proxy reset that changed something.
func writes() map[string]int {
	counts := map[string]int{}
	for _, count := range stack.IronCoreProxy.Counts() {
		if !slices.Contains([]string{"get", "list", "watch"}, count.Verb) {
			counts[count.Verb+" "+count.Resource] += count.N
		}
	}
	return counts
}

func requireNoLoadBalancer(t *testing.T, name string) {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{}
	err := stack.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: stack.Namespace, Name: name}, lb)
	if err == nil {
		t.Fatalf("IronCore LoadBalancer %s exists", name)
	}
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

func hasTargetLabel(t *testing.T, machine string) bool {
	t.Helper()
	return networkInterface(t, machine).Labels[keys.LabelLoadBalancerTarget] == stack.ClusterName
}

func errorContains(err error, text string) bool {
	return err != nil && strings.Contains(err.Error(), text)
}

// equalJSON compares two values by their JSON form, which is what the API server stores.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	aJSON, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	bJSON, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(aJSON) == string(bJSON)
}

// waitForCachedLoadBalancer waits until the provider's IronCore cache holds the named
// LoadBalancer.
func waitForCachedLoadBalancer(t *testing.T, c *provider.Cloud, name string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "LoadBalancer "+name+" in the cache", func(ctx context.Context) error {
		_, err := c.IronCore().LoadBalancer(ctx, name)
		return err
	})
}

// updated is UpdateLoadBalancer's error as the service controller takes it: ImplementedElsewhere
// (the target controller writes the targets) is a success.
func updated(err error) error {
	if err == cloudprovider.ImplementedElsewhere { //nolint:errorlint // the service controller compares with ==
		return nil
	}
	return err
}

// readyService creates a Service annotated with annotation "true" for one worker Node, and
// ensures its LoadBalancer until ready, writing the status into the Service; it returns the
// provider, its load balancers, the Nodes, the Service and its IronCore LoadBalancer.
func readyService(t *testing.T, node, name, annotation string) (*provider.Cloud, cloudprovider.LoadBalancer, []*corev1.Node, *corev1.Service, *networkingv1alpha1.LoadBalancer) {
	t.Helper()
	c := testCloud(t)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, node)
	service := createService(t, name, testenv.ServiceOptions{Annotations: map[string]string{annotation: "true"}})
	service.Status.LoadBalancer = *ensureUntilReady(t, lbs, service, nodes)
	return c, lbs, nodes, service, ironcoreLoadBalancer(t, lbspec.Name(service))
}

// explicitService starts a provider of the test's own that writes routings, and creates a
// Service for worker Nodes of the names; it returns the provider, its load balancers, the
// Nodes and the Service.
func explicitService(t *testing.T, name string, nodeNames ...string) (*provider.Cloud, cloudprovider.LoadBalancer, []*corev1.Node, *corev1.Service) {
	t.Helper()
	c := startTestCloud(t, explicitTargets)
	lbs := loadBalancerOf(t, c)
	nodes := workerNodes(t, nodeNames...)
	return c, lbs, nodes, createService(t, name, testenv.ServiceOptions{})
}
