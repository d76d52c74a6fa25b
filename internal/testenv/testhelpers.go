package testenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	componentmetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
)

// The CCM's two target modes, as InTargetModes names them: the CCM writes each LoadBalancer's
// routing (explicit), or LoadBalancers select the NetworkInterfaces it labels (selector).
const (
	ModeExplicit = "explicit"
	ModeSelector = "selector"
)

// InTargetModes runs test as a subtest per named target mode, in the order named; useSelector
// is whether the mode is ModeSelector.
func InTargetModes(t *testing.T, test func(t *testing.T, mode string, useSelector bool), modes ...string) {
	t.Helper()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { test(t, mode, mode == ModeSelector) })
	}
}

// SetPower sets the Machine's power on IronCore, reading it anew into machine first.
func (s *Stack) SetPower(t testing.TB, machine *computev1alpha1.Machine, power computev1alpha1.Power) {
	t.Helper()
	ctx := context.Background()
	if err := s.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
		t.Fatal(err)
	}
	base := machine.DeepCopy()
	machine.Spec.Power = power
	if err := s.IronCore.Client.Patch(ctx, machine, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// Relabel sets labels on the IronCore object, reading it anew into obj first (its name and,
// if namespaced, namespace set); an empty value removes a label. The merge patch leaves the
// other labels to whoever else writes them meanwhile.
func (s *Stack) Relabel(t testing.TB, obj client.Object, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	if err := s.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	current := obj.GetLabels()
	if current == nil {
		current = map[string]string{}
	}
	for key, value := range labels {
		if value == "" {
			delete(current, key)
		} else {
			current[key] = value
		}
	}
	obj.SetLabels(current)
	if err := s.IronCore.Client.Patch(ctx, obj, patch); err != nil {
		t.Fatal(err)
	}
}

// NetworkInterfaceIPs lists the status IPs of the Machines' NetworkInterfaces, sorted.
func (s *Stack) NetworkInterfaceIPs(t testing.TB, machines ...string) []string {
	t.Helper()
	ips := []string{}
	for _, machine := range machines {
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := s.IronCore.Client.Get(context.Background(), client.ObjectKey{Namespace: s.Namespace, Name: NetworkInterfaceName(machine)}, nic); err != nil {
			t.Fatal(err)
		}
		for _, ip := range nic.Status.IPs {
			ips = append(ips, ip.String())
		}
	}
	slices.Sort(ips)
	return ips
}

// WaitForRouting waits up to timeout until the LoadBalancer's routing sends traffic to exactly
// the IPs, sorted.
func (s *Stack) WaitForRouting(t testing.TB, timeout time.Duration, lbName string, want []string) {
	t.Helper()
	err := WaitFor(context.Background(), timeout, fmt.Sprintf("routing of %s to %v", lbName, want), func(ctx context.Context) error {
		routing := &networkingv1alpha1.LoadBalancerRouting{}
		if err := s.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: lbName}, routing); err != nil {
			return err
		}
		if got := DestinationIPs(routing); !slices.Equal(got, want) {
			return fmt.Errorf("destinations %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// DestinationIPs lists the IPs the routing sends to, sorted.
func DestinationIPs(routing *networkingv1alpha1.LoadBalancerRouting) []string {
	ips := []string{}
	for _, destination := range routing.Destinations {
		ips = append(ips, destination.IP.String())
	}
	slices.Sort(ips)
	return ips
}

// WatchRoutings lists the namespace's LoadBalancerRoutings, hands them to listed, then calls
// changed with every change a watch from that list sees (deleted: a deletion) until the test
// ends.
func (s *Stack) WatchRoutings(t testing.TB, listed func([]networkingv1alpha1.LoadBalancerRouting), changed func(routing *networkingv1alpha1.LoadBalancerRouting, deleted bool)) {
	t.Helper()
	clientset, err := ironcoreclientset.NewForConfig(s.IronCore.Config)
	if err != nil {
		t.Fatal(err)
	}
	routings := clientset.NetworkingV1alpha1().LoadBalancerRoutings(s.Namespace)
	ctx, cancel := context.WithCancel(context.Background())
	done, err := ListAndWatch(ctx, routings.List, routings.Watch, func(list *networkingv1alpha1.LoadBalancerRoutingList) {
		listed(list.Items)
	}, func(event watch.Event) {
		if routing, ok := event.Object.(*networkingv1alpha1.LoadBalancerRouting); ok {
			changed(routing, event.Type == watch.Deleted)
		}
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// Counter reads one of the CCM's counters.
func Counter(t testing.TB, counter componentmetrics.CounterMetric) float64 {
	t.Helper()
	value, err := testutil.GetCounterMetricValue(counter)
	if err != nil {
		t.Fatal(err)
	}
	return value
}

// WaitForIronCore waits up to timeout until check passes on obj, an IronCore object read anew
// from the API server into obj (its namespace and name set) before each check.
func (s *Stack) WaitForIronCore(t testing.TB, timeout time.Duration, what string, obj client.Object, check func() error) {
	t.Helper()
	err := WaitFor(context.Background(), timeout, what, func(ctx context.Context) error {
		if err := s.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		return check()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// CreateMachineForTest creates a Machine as CreateMachine does, deleted when the test ends.
func (s *Stack) CreateMachineForTest(t testing.TB, name string, opts MachineOptions) *computev1alpha1.Machine {
	t.Helper()
	machine, err := s.CreateMachine(context.Background(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(s.IronCore.Client.Delete(context.Background(), machine)) })
	return machine
}

// CreateNodeForTest registers a Node as CreateNode does, deleted when the test ends, so that the
// controllers of the tests that follow do not see it.
func (s *Stack) CreateNodeForTest(t testing.TB, name string, opts NodeOptions) *corev1.Node {
	t.Helper()
	node, err := s.CreateNode(context.Background(), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return node
}

// WaitForEvent waits up to timeout for an event of the reason on the Service, and returns its
// message.
func (s *Stack) WaitForEvent(ctx context.Context, timeout time.Duration, service *corev1.Service, reason string) (string, error) {
	var message string
	err := WaitFor(ctx, timeout, "event "+reason+" on Service "+service.Namespace+"/"+service.Name, func(ctx context.Context) error {
		events, err := s.TargetClientset.CoreV1().Events(service.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.uid=" + string(service.UID) + ",reason=" + reason})
		if err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return errors.New("none yet")
		}
		message = events.Items[0].Message
		return nil
	})
	return message, err
}

// IngressIPs lists the addresses of the Service's status.
func IngressIPs(service *corev1.Service) []string {
	var ips []string
	for _, ingress := range service.Status.LoadBalancer.Ingress {
		ips = append(ips, ingress.IP)
	}
	return ips
}

// CreateRetainedLoadBalancer creates a Public LoadBalancer on the cluster Network as the CCM of
// the named cluster leaves one it retained, with the annotations given besides its cluster's.
func (s *Stack) CreateRetainedLoadBalancer(ctx context.Context, name, cluster string, annotations map[string]string) (*networkingv1alpha1.LoadBalancer, error) {
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name,
			Labels:      map[string]string{keys.LabelClusterName: cluster, keys.LabelRetained: "true"},
			Annotations: map[string]string{keys.AnnotationClusterName: cluster},
		},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: s.Network},
		},
	}
	maps.Copy(lb.Annotations, annotations)
	return lb, s.IronCore.Client.Create(ctx, lb)
}

// RepoRootForTest is RepoRoot, failing the test if it cannot be found.
func RepoRootForTest(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// CreateRootPrefixForTest creates a root Prefix as CreateRootPrefix does, deleted when the
// test ends.
func (s *Stack) CreateRootPrefixForTest(t testing.TB, name, cidr string, labels map[string]string) *ipamv1alpha1.Prefix {
	t.Helper()
	prefix, err := s.CreateRootPrefix(context.Background(), name, cidr, labels)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.IronCore.Client.Delete(context.Background(), prefix) })
	return prefix
}

// StartIronCoreClientForTest starts an IronCore client as StartIronCoreClientLimitedBy does,
// until the test ends; it returns the client and a context that ends with the test.
func (s *Stack) StartIronCoreClientForTest(t testing.TB, limiter flowcontrol.RateLimiter) (context.Context, *ironcore.Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := s.StartIronCoreClientLimitedBy(ctx, limiter)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c
}

// LiveService reads the Service from the API server.
func (s *Stack) LiveService(t testing.TB, service *corev1.Service) *corev1.Service {
	t.Helper()
	live, err := s.TargetClientset.CoreV1().Services(service.Namespace).Get(context.Background(), service.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// Controller is one of the CCM's controllers that work a queue with a number of workers.
type Controller interface {
	Run(ctx context.Context, workers int)
}

// RunControllerForTest runs a controller as the CCM does, until the test ends: newController
// wires it to an IronCore client of the stack and to shared informers on clientset, which then
// start, and it runs with two workers.
func (s *Stack) RunControllerForTest(t testing.TB, clientset kubernetes.Interface, newController func(*ironcore.Client, informers.SharedInformerFactory) (Controller, error)) {
	t.Helper()
	ctx, ironcoreClient := s.StartIronCoreClientForTest(t, nil)
	factory := informers.NewSharedInformerFactory(clientset, 0)
	c, err := newController(ironcoreClient, factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx, 2)
}

// AwaitEvent waits up to timeout for an event of the reason to reach the recorder, passing over
// events of other reasons, and returns it.
func AwaitEvent(t testing.TB, recorder *record.FakeRecorder, timeout time.Duration, reason string) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case event := <-recorder.Events:
			// A FakeRecorder's event reads "<type> <reason> <message>".
			if strings.Contains(event, " "+reason+" ") {
				return event
			}
		case <-deadline:
			t.Fatalf("no %s event in %s", reason, timeout)
		}
	}
}

// OwnedLoadBalancer returns, not yet created, a Public IPv4 LoadBalancer in the stack's namespace
// on the network, labelled as this CCM labels the one it makes for the owner's Service.
func (s *Stack) OwnedLoadBalancer(name string, owner ironcore.Owner, network string) *networkingv1alpha1.LoadBalancer {
	return &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name, Labels: map[string]string{
			keys.LabelClusterName: owner.Cluster, keys.LabelServiceNamespace: owner.Namespace,
			keys.LabelServiceName: owner.Name, keys.LabelServiceUID: owner.UID,
		}},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: network},
		},
	}
}

// ServiceLoadBalancer returns, not yet created, a LoadBalancer of the Service as the provider
// names and labels it, on the cluster Network, without ports.
func (s *Stack) ServiceLoadBalancer(service *corev1.Service) *networkingv1alpha1.LoadBalancer {
	owner := ironcore.Owner{Cluster: s.ClusterName, Namespace: service.Namespace, Name: service.Name, UID: string(service.UID)}
	return s.OwnedLoadBalancer(lbspec.Name(service), owner, s.Network)
}

// CreateIronCoreForTest creates the IronCore object, deleted when the test ends: the tests of a
// package share the stack's namespace, and a later test must not find this one's objects.
func (s *Stack) CreateIronCoreForTest(t testing.TB, obj client.Object) {
	t.Helper()
	if err := s.IronCore.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(s.IronCore.Client.Delete(context.Background(), obj)) })
}

// WriteIronCoreTokenKubeconfigForTest writes, at path, a kubeconfig that reaches IronCore's API
// server directly with a new token of the CCM's IronCore ServiceAccount, replacing the file in
// one step as a mounted Secret's update does. revoke revokes the token and returns once IronCore
// refuses it.
func (s *Stack) WriteIronCoreTokenKubeconfigForTest(t testing.TB, path string) (revoke func()) {
	t.Helper()
	return writeTokenKubeconfigForTest(t, s.IronCore, s.ironcoreAccount, s.Namespace, path)
}

// WriteTargetTokenKubeconfigForTest is WriteIronCoreTokenKubeconfigForTest for the target
// cluster: a kubeconfig for --kubeconfig with a new token of the CCM's ServiceAccount there.
func (s *Stack) WriteTargetTokenKubeconfigForTest(t testing.TB, path string) (revoke func()) {
	t.Helper()
	return writeTokenKubeconfigForTest(t, s.Target, s.targetAccount, "", path)
}

// writeTokenKubeconfigForTest writes the kubeconfig of a new token of account on cluster. The
// token is bound to a Secret of its own: deleting it revokes the token, as deleting a
// ServiceAccount's token Secret does.
func writeTokenKubeconfigForTest(t testing.TB, cluster *Cluster, account types.NamespacedName, namespace, path string) (revoke func()) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: account.Namespace, GenerateName: account.Name + "-token-"}}
	if err := cluster.Client.Create(ctx, secret); err != nil {
		t.Fatalf("create the Secret the token is bound to: %v", err)
	}
	token, err := serviceAccountToken(ctx, cluster, account.Namespace, account.Name, secret)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: cluster.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData}, BearerToken: token}
	if err := WriteKubeconfig(path+".new", cfg, namespace); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := cluster.Client.Delete(ctx, secret); err != nil {
			t.Fatalf("revoke the token: delete Secret %s: %v", secret.Name, err)
		}
		clientset, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The API server learns of the deleted Secret through its cache.
		err = WaitFor(ctx, time.Minute, "the API server refusing the revoked token", func(context.Context) error {
			if _, err := clientset.Discovery().ServerVersion(); !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("a request with the revoked token: %w, not 401", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
