package lbtargets_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	ironcoreclientset "github.com/ironcore-dev/ironcore/client-go/ironcore/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/record"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/component-base/metrics/testutil"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbtargets"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/providerid"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// start runs the controller as cmd does, in explicit mode (it writes every routing), on real
// informers and the IronCore cache, without the provider: no LoadBalancer is made for a
// Service here, the tests make it themselves.
func start(t *testing.T) *lbtargets.Controller {
	t.Helper()
	return startWith(t, func(*lbtargets.Config) {})
}

// startWith is start with the Config changed by change.
func startWith(t *testing.T, change func(*lbtargets.Config)) *lbtargets.Controller {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ironcoreClient, err := stack.StartIronCoreClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	config := lbtargets.Config{
		IronCore: ironcoreClient, Cluster: stack.ClusterName, Network: stack.Network,
		Health:   targetrules.Health{Enabled: true, ReadyGrace: 10 * time.Minute}, // longer than any wait here
		Owners:   ironcore.Owners{Clusters: []string{stack.ClusterName}},
		Recorder: record.NewFakeRecorder(100),
	}
	factory := informers.NewSharedInformerFactory(stack.TargetClientset, 0)
	config.Nodes, config.Services, config.EndpointSlices = factory.Core().V1().Nodes(), factory.Core().V1().Services(), factory.Discovery().V1().EndpointSlices()
	change(&config)
	c, err := lbtargets.New(config)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	go c.Run(ctx)
	return c
}

// nodeOnMachine creates a Machine, waits until IronCore runs it with an address on its
// NetworkInterface, and registers its Node, initialized, Ready or, as a kubelet on its first
// start, not; it returns the address.
func nodeOnMachine(t *testing.T, name string, ready bool) string {
	t.Helper()
	return nodeOnMachineWith(t, name, testenv.NodeOptions{NotReady: !ready})
}

// nodeOnMachineWith is nodeOnMachine with the Node registered with opts and the Machine's
// provider ID.
func nodeOnMachineWith(t *testing.T, name string, opts testenv.NodeOptions) string {
	t.Helper()
	ctx := context.Background()
	machine, err := stack.CreateMachine(ctx, name, testenv.MachineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(stack.IronCore.Client.Delete(context.Background(), machine)) })
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := testenv.WaitFor(ctx, time.Minute, "an Available NetworkInterface with an address", func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(name)}, nic); err != nil {
			return err
		}
		if nic.Status.State != networkingv1alpha1.NetworkInterfaceStateAvailable || len(nic.Status.IPs) == 0 {
			return fmt.Errorf("state %q, addresses %v", nic.Status.State, nic.Status.IPs)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	id := providerid.ID{Namespace: stack.Namespace, Machine: name}
	opts.ProviderID = id.String()
	node, err := stack.CreateNode(ctx, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Initialized, as the cloud node controller leaves it.
	node.Spec.Taints = nil
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stack.TargetClientset.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return nic.Status.IPs[0].String()
}

// loadBalancerFor creates the IronCore LoadBalancer of the Service, recording it as its owner
// as the provider does.
func loadBalancerFor(t *testing.T, service *corev1.Service) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(service), Labels: map[string]string{
			keys.LabelClusterName: stack.ClusterName, keys.LabelServiceNamespace: service.Namespace,
			keys.LabelServiceName: service.Name, keys.LabelServiceUID: string(service.UID),
		}},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
		},
	}
	if err := stack.IronCore.Client.Create(context.Background(), lb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(stack.IronCore.Client.Delete(context.Background(), lb)) })
	return lb
}

// waitForDestinations waits until the LoadBalancer's routing sends to exactly the addresses.
func waitForDestinations(t *testing.T, lb *networkingv1alpha1.LoadBalancer, want ...string) {
	t.Helper()
	slices.Sort(want)
	if err := testenv.WaitFor(context.Background(), time.Minute, fmt.Sprintf("the routing of %s to send to %v", lb.Name, want), func(ctx context.Context) error {
		routing := &networkingv1alpha1.LoadBalancerRouting{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), routing); err != nil {
			return err
		}
		var got []string
		for _, destination := range routing.Destinations {
			got = append(got, destination.IP.String())
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("it sends to %v", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The controller alone, from its own watches: a Service's LoadBalancer appearing gets a
// routing to the Nodes that can serve, and a deleted Machine leaves it.
func TestARoutingFollowsTheNodesThatCanServe(t *testing.T) {
	controller := start(t)
	a, b := nodeOnMachine(t, "targets-a", true), nodeOnMachine(t, "targets-b", true)
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "targets-follow", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Without an address or a routing, the Service's routing goes ahead in the queue; once
	// the routing holds its Nodes, it no longer does.
	waitForFirst(t, controller, service, true)
	lb := loadBalancerFor(t, service)
	waitForDestinations(t, lb, a, b)
	waitForFirst(t, controller, service, false)
	// A barrier: once a later Node has joined, the syncs the first ones caused are done, and
	// only the Machine's deletion can take targets-b out.
	c := nodeOnMachine(t, "targets-f", true)
	waitForDestinations(t, lb, a, b, c)

	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "targets-b"}}
	if err := stack.IronCore.Client.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	waitForDestinations(t, lb, a, c)
}

// A Node that registers and has never been Ready is no destination, whatever else changes;
// once Ready, it is one.
func TestANodeJoinsOnlyOnceReady(t *testing.T) {
	_ = start(t)
	c, d := nodeOnMachine(t, "targets-c", true), nodeOnMachine(t, "targets-d", false)
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "targets-ready", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb := loadBalancerFor(t, service)
	waitForDestinations(t, lb, c)
	// A barrier: a Node registered after targets-d joins, so the sync that adds it saw
	// targets-d as it is, never Ready.
	e := nodeOnMachine(t, "targets-e", true)
	waitForDestinations(t, lb, c, e)
	if _, err := stack.SetNodeReady(ctx, "targets-d", corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	waitForDestinations(t, lb, c, d, e)
}

// waitForFirst waits until the Service's routing goes first in the controller's queue, or no
// longer does.
func waitForFirst(t *testing.T, controller *lbtargets.Controller, service *corev1.Service, first bool) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), time.Minute, fmt.Sprintf("the routing of %s to go first: %v", service.Name, first), func(context.Context) error {
		if got := controller.WaitsForFirstTraffic(service.Namespace, service.Name); got != first {
			return fmt.Errorf("it goes first: %v", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Until IronCore gives a LoadBalancer its address, no traffic can reach it: its routing holds
// its first few Nodes only, the longest-standing; the address brings every Node in.
func TestARoutingHoldsItsFirstNodesUntilTheAddress(t *testing.T) {
	_ = startWith(t, func(config *lbtargets.Config) { config.FirstTargetsFor = time.Hour })
	g, h, i := nodeOnMachine(t, "targets-g", true), nodeOnMachine(t, "targets-h", true), nodeOnMachine(t, "targets-i", true)
	j := nodeOnMachine(t, "targets-j", true)
	ctx := context.Background()
	lb := heldLoadBalancer(t, "targets-first")
	waitForDestinations(t, lb, g, h, i)
	// The address alone, as the provider writes it: nothing else about the LoadBalancer changes.
	base := lb.DeepCopy()
	lb.Status.IPs = []commonv1alpha1.IP{commonv1alpha1.MustParseIP("198.51.100.7")}
	if err := stack.IronCore.Client.Status().Patch(ctx, lb, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	waitForDestinations(t, lb, g, h, i, j)
}

// While a routing holds its first Nodes only, a longer-standing Node that comes back (the
// cluster autoscaler's deletion taint taken off) takes none of them out: which Nodes hold the
// Service's first traffic does not churn, and no Node that can serve is ever dropped.
func TestAFirstTargetStaysWhenALongerStandingNodeComesBack(t *testing.T) {
	firstTargetsStayWhenOneComesBack(t, "targets-stay", false)
}

// The same, with the IronCore cache behind the controller's last write: it still shows the
// first targets the Node that went away was one of. The routed Nodes are those of the newer of
// the two, the write, so the Node coming back again takes no Node out.
func TestACacheBehindTheLastWriteBringsNoFirstTargetBack(t *testing.T) {
	firstTargetsStayWhenOneComesBack(t, "targets-behind", true)
}

// firstTargetsStayWhenOneComesBack has the longest-standing of four Nodes, one of a routing's
// three first targets, tainted for deletion and untainted again, the routing watch held from
// before the taint if cacheBehind, and checks the routing keeps the three that stood in.
func firstTargetsStayWhenOneComesBack(t *testing.T, name string, cacheBehind bool) {
	_ = startWith(t, func(config *lbtargets.Config) { config.FirstTargetsFor = time.Hour })
	a, b, c := nodeOnMachine(t, name+"-a", true), nodeOnMachine(t, name+"-b", true), nodeOnMachine(t, name+"-c", true)
	d := nodeOnMachine(t, name+"-d", true)
	lb := heldLoadBalancer(t, name)
	waitForDestinations(t, lb, a, b, c)

	if cacheBehind {
		release := stack.IronCoreProxy.HoldWatches("loadbalancerroutings.networking.ironcore.dev")
		t.Cleanup(release)
	}
	taintForDeletion(t, name+"-a", true)
	waitForDestinations(t, lb, b, c, d)
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
	waitForTargets(t, service, 3)

	taintForDeletion(t, name+"-a", false)
	// The sync that sees the Node back chooses among all four, and records so after its write.
	waitForTargets(t, service, 4)
	waitForDestinations(t, lb, b, c, d)
}

// taintForDeletion puts the cluster autoscaler's taint on the named Node, or takes it off.
func taintForDeletion(t *testing.T, name string, on bool) {
	t.Helper()
	ctx := context.Background()
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if on {
		node.Spec.Taints = []corev1.Taint{{Key: servicecontroller.ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
	}
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitForTargets waits until the latest sync of the Service's targets chose n Nodes.
func waitForTargets(t *testing.T, service *corev1.Service, n int) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), time.Minute, fmt.Sprintf("a sync of %s choosing %d Nodes", service.Name, n), func(context.Context) error {
		got, err := testutil.GetGaugeMetricValue(metrics.LoadBalancerTargets.WithLabelValues(service.Namespace, service.Name))
		if err != nil {
			return err
		}
		if int(got) != n {
			return fmt.Errorf("it chose %v", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A LoadBalancer that IronCore is slow to give an address still has a routing to every Node
// once FirstTargetsFor has passed.
func TestARoutingHoldsEveryNodeOnceTheFirstTargetsTimeIsUp(t *testing.T) {
	_ = startWith(t, func(config *lbtargets.Config) { config.FirstTargetsFor = 5 * time.Second })
	k, l, m := nodeOnMachine(t, "targets-k", true), nodeOnMachine(t, "targets-l", true), nodeOnMachine(t, "targets-m", true)
	n := nodeOnMachine(t, "targets-n", true)
	lb := heldLoadBalancer(t, "targets-slow")
	waitForDestinations(t, lb, k, l, m, n)
}

// A LoadBalancer that IronCore has given its address before its routing is written still gets
// its first Nodes in the first write, which gives the Service traffic, and every Node in the
// next one.
func TestAFirstRoutingHoldsItsFirstNodesWhenTheAddressCameFirst(t *testing.T) {
	w, x, y := nodeOnMachine(t, "targets-w", true), nodeOnMachine(t, "targets-x", true), nodeOnMachine(t, "targets-y", true)
	z := nodeOnMachine(t, "targets-z", true)
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "targets-addressed", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb := loadBalancerFor(t, service)
	if err := testenv.WaitFor(ctx, time.Minute, "the LoadBalancer's address", func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), lb); err != nil {
			return err
		}
		if len(lb.Status.IPs) == 0 {
			return fmt.Errorf("no address yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	firstWrite := firstRoutingWrite(t, lb.Name)
	_ = startWith(t, func(config *lbtargets.Config) { config.FirstTargetsFor = time.Hour })
	waitForDestinations(t, lb, w, x, y, z)
	if got := <-firstWrite; got != 3 {
		t.Errorf("the first routing held %d destinations, want the first 3 Nodes", got)
	}
}

// firstRoutingWrite watches for the named routing's creation and sends how many destinations
// it was created with.
func firstRoutingWrite(t *testing.T, name string) <-chan int {
	t.Helper()
	clientset, err := ironcoreclientset.NewForConfig(stack.IronCore.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watcher, err := clientset.NetworkingV1alpha1().LoadBalancerRoutings(stack.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan int, 1)
	go func() {
		defer watcher.Stop()
		for event := range watcher.ResultChan() {
			if routing, ok := event.Object.(*networkingv1alpha1.LoadBalancerRouting); ok {
				first <- len(routing.Destinations)
				return
			}
		}
		close(first)
	}()
	return first
}

// heldLoadBalancer creates a Service and its IronCore LoadBalancer, to which the simulated
// provider gives no address.
func heldLoadBalancer(t *testing.T, name string) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	service, err := stack.CreateLoadBalancerService(context.Background(), name, testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := &networkingv1alpha1.LoadBalancer{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: lbspec.Name(service)}}
	stack.Simulator.Hold(held)
	t.Cleanup(func() { stack.Simulator.Release(held) })
	return loadBalancerFor(t, service)
}

// routingWritesSince counts the writes of the LoadBalancer's routing the IronCore proxy saw
// since the instant.
func routingWritesSince(lb *networkingv1alpha1.LoadBalancer, since time.Time) int {
	n := 0
	for _, write := range stack.IronCoreProxy.Writes() {
		if strings.HasPrefix(write.Resource, "loadbalancerroutings.") && write.Name == lb.Name && write.At.After(since) {
			n++
		}
	}
	return n
}

// Joining Nodes wait for the others of their wave, however long the window; nothing else does.
// With an hour's window, a Service's first routing still comes at once, a wave of Nodes turning
// Ready writes nothing, a Machine deleted inside the window is written at once, in one write
// that carries the whole wave with it, and so is a Node excluded from load balancers.
func TestJoinsWaitForTheirWaveAndRemovalsDoNot(t *testing.T) {
	controller := startWith(t, func(config *lbtargets.Config) { config.Coalesce = time.Hour })
	a, b := nodeOnMachine(t, "targets-wave-a", true), nodeOnMachine(t, "targets-wave-b", true)
	wave := []string{"targets-wave-c", "targets-wave-d", "targets-wave-e"}
	var waveAddresses []string
	for _, name := range wave {
		waveAddresses = append(waveAddresses, nodeOnMachine(t, name, false))
	}
	ctx := context.Background()
	service, err := stack.CreateLoadBalancerService(ctx, "targets-wave", testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb := loadBalancerFor(t, service)
	if err := testenv.WaitFor(ctx, time.Minute, "the LoadBalancer's address", func(ctx context.Context) error {
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), lb); err != nil {
			return err
		}
		if len(lb.Status.IPs) == 0 {
			return errors.New("no address yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Not held back by the window: the Service has no traffic yet.
	waitForDestinations(t, lb, a, b)

	waveBegan := time.Now()
	for _, name := range wave {
		if _, err := stack.SetNodeReady(ctx, name, corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
	}
	// Once the controller has judged the wave able to serve, a join written at once would be on
	// its way.
	if err := testenv.WaitFor(ctx, time.Minute, "the controller to judge the wave able to serve", func(context.Context) error {
		for _, name := range wave {
			if !controller.Serves(name) {
				return fmt.Errorf("%s cannot serve yet", name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: "targets-wave-a"}}
	if err := stack.IronCore.Client.Delete(ctx, machine); err != nil {
		t.Fatal(err)
	}
	waitForDestinations(t, lb, append([]string{b}, waveAddresses...)...)
	if n := routingWritesSince(lb, waveBegan); n != 1 {
		t.Errorf("the wave of %d Nodes and the removal took %d routing writes, want 1: the removal's, with the wave", len(wave), n)
	}

	// A Node that only its own verdict takes out, its NetworkInterface unchanged: excluded
	// from load balancers, it leaves at once too.
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, "targets-wave-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[corev1.LabelNodeExcludeBalancers] = "true"
	if _, err := stack.TargetClientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForDestinations(t, lb, waveAddresses...)
}
