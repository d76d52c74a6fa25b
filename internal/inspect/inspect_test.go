package inspect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/inspect"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/lbspec"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

var stack *testenv.Stack

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &stack))
}

// waitTimeout bounds each wait for IronCore (scheduling, IPAM, the simulator) to settle.
const waitTimeout = 2 * time.Minute

// options inspects the stack with the CCM's own files, through the counting proxy.
func options() *inspect.Options {
	opts := inspect.NewOptions()
	opts.Kubeconfig = stack.CCMTargetKubeconfig
	opts.IronCoreKubeconfig = stack.CCMIronCoreKubeconfig
	opts.CloudConfig = stack.CloudConfig
	return opts
}

// TestInspectShowsWhatDiffers builds a cluster with one of each thing an operator looks for,
// inspects it once, and checks that the JSON and the table say so, and that it only read.
func TestInspectShowsWhatDiffers(t *testing.T) {
	ctx := context.Background()
	lab := stack.ClusterName

	// Machines: a healthy one, one for an uninitialized Node, one shut down, one found by
	// its guest hostname.
	machines := map[string]testenv.MachineOptions{
		"insp-a":    {Pool: "pool-a"},
		"insp-b":    {Pool: "pool-b"},
		"insp-d":    {Pool: "pool-a", PowerOff: true},
		"insp-vm-e": {Pool: "pool-b", Hostname: "insp-e"},
	}
	for name, opts := range machines {
		if _, err := stack.CreateMachine(ctx, name, opts); err != nil {
			t.Fatal(err)
		}
	}
	nicIPs := map[string]string{}
	for name := range machines {
		nic := waitForNetworkInterface(t, name)
		nicIPs[name] = nic.Status.IPs[0].String()
	}

	// insp-a's interface: labelled as the CCM labels targets, with one pod CIDR routed and one
	// managed prefix that is no pod CIDR of its Node.
	nicA := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName("insp-a")}, nicA); err != nil {
		t.Fatal(err)
	}
	base := nicA.DeepCopy()
	nicA.Labels = map[string]string{keys.LabelCluster: lab, keys.LabelLoadBalancerTarget: lab}
	nicA.Annotations = map[string]string{keys.AnnotationRoutes: "10.244.1.0/24,10.244.9.0/24"}
	nicA.Spec.Prefixes = []networkingv1alpha1.PrefixSource{prefixValue("10.244.1.0/24"), prefixValue("10.244.9.0/24")}
	if err := stack.IronCore.Client.Patch(ctx, nicA, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the routed prefix in the status of insp-a's NetworkInterface", func(ctx context.Context) error {
		nic := &networkingv1alpha1.NetworkInterface{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(nicA), nic); err != nil {
			return err
		}
		if len(nic.Status.Prefixes) < 2 {
			return fmt.Errorf("status prefixes %v", nic.Status.Prefixes)
		}
		return nil
	})

	// Nodes: insp-a initialized and in sync; insp-b and insp-e not initialized; insp-c's
	// Machine is gone; insp-d's Machine is shut down and its addresses are stale.
	createNode(t, "insp-a", "ironcore://tenant/insp-a", []string{"10.244.1.0/24", "fd00:244:0:1::/64"}, "zone-a",
		[]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nicIPs["insp-a"]}, {Type: corev1.NodeHostName, Address: "insp-a"}})
	createNode(t, "insp-b", "", nil, "", nil)
	createNode(t, "insp-c", "ironcore://tenant/insp-gone", nil, "zone-a", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.3"}})
	createNode(t, "insp-d", "ironcore://tenant/insp-d", nil, "zone-a", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}})
	createNode(t, "insp-e", "", nil, "", nil)

	// Services: web has its LoadBalancer; taken's name is held by another cluster's
	// LoadBalancer; pending has none yet; and an orphan's Service is gone.
	web := createService(t, "insp-web")
	webLB := createLoadBalancer(t, lbspec.Name(web), inspect.Owner{Cluster: lab, Namespace: web.Namespace, Name: web.Name, UID: string(web.UID)})
	taken := createService(t, "insp-taken")
	createLoadBalancer(t, lbspec.Name(taken), inspect.Owner{Cluster: "other", Namespace: "default", Name: "someone-else", UID: "7c1d2e3f-0000-4000-8000-000000000001"})
	createService(t, "insp-pending")
	createLoadBalancer(t, "insp-orphan", inspect.Owner{Cluster: lab, Namespace: "default", Name: "insp-deleted", UID: "7c1d2e3f-0000-4000-8000-000000000002"})
	createRetainedLoadBalancer(t, "insp-retained", lab, "default/insp-kept", "2026-11-01T10:00:00Z")
	webIP := waitForLoadBalancer(t, webLB, testenv.NetworkInterfaceName("insp-a"))
	web.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: webIP}}
	if _, err := stack.TargetClientset.CoreV1().Services(web.Namespace).UpdateStatus(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	stack.IronCoreProxy.Reset()
	report, err := inspect.Run(ctx, options())
	if err != nil {
		t.Fatal(err)
	}
	assertOnlyRead(t)

	var out bytes.Buffer
	if err := report.Write(&out, inspect.OutputJSON); err != nil {
		t.Fatal(err)
	}
	var decoded inspect.Report
	decoder := json.NewDecoder(&out)
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&decoded); err != nil {
		t.Fatalf("the JSON output does not decode: %v", err)
	}
	t.Run("nodes", func(t *testing.T) { checkNodes(t, &decoded, nicIPs) })
	t.Run("load balancers", func(t *testing.T) { checkServices(t, &decoded, web, taken, webIP) })
	t.Run("routes", func(t *testing.T) { checkRoutes(t, &decoded) })
	t.Run("orphans and conflicts", func(t *testing.T) { checkOrphansAndConflicts(t, &decoded, taken) })

	out.Reset()
	if err := report.Write(&out, inspect.OutputTable); err != nil {
		t.Fatal(err)
	}
	t.Run("table", func(t *testing.T) { checkTable(t, out.String(), taken) })
	if t.Failed() {
		t.Logf("table output:\n%s", out.String())
	}
}

func checkNodes(t *testing.T, report *inspect.Report, nicIPs map[string]string) {
	a := findNode(t, report, "insp-a")
	if a.Machine != "insp-a" || a.MatchedBy != inspect.MatchedByProviderID || a.MachinePool != "pool-a" || a.Zone != "zone-a" || a.MachineState != "Running" {
		t.Errorf("insp-a: %+v", a)
	}
	if len(a.Issues) != 0 {
		t.Errorf("insp-a is in sync, but issues are reported: %+v", a.Issues)
	}
	if !slices.Contains(a.MachineAddresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: nicIPs["insp-a"]}) {
		t.Errorf("insp-a's Machine addresses %v lack its NetworkInterface's IP %s", a.MachineAddresses, nicIPs["insp-a"])
	}

	b := findNode(t, report, "insp-b")
	if b.Machine != "insp-b" || b.MatchedBy != inspect.MatchedByName {
		t.Errorf("insp-b's Machine: %q by %q, want insp-b by name", b.Machine, b.MatchedBy)
	}
	wantIssues(t, "insp-b", b.Issues, inspect.IssueNoProviderID, inspect.IssueUninitialized)

	c := findNode(t, report, "insp-c")
	wantIssues(t, "insp-c", c.Issues, inspect.IssueMachineMissing)

	d := findNode(t, report, "insp-d")
	if d.MachineState != "Shutdown" {
		t.Errorf("insp-d's Machine state is %q, want Shutdown", d.MachineState)
	}
	wantIssues(t, "insp-d", d.Issues, inspect.IssueMachineShutdown, inspect.IssueAddressesDiffer)

	e := findNode(t, report, "insp-e")
	if e.Machine != "insp-vm-e" || e.MatchedBy != inspect.MatchedByHostname {
		t.Errorf("insp-e's Machine: %q by %q, want insp-vm-e by hostname", e.Machine, e.MatchedBy)
	}
}

func checkServices(t *testing.T, report *inspect.Report, web, taken *corev1.Service, webIP string) {
	w := findService(t, report, web.Name)
	// insp-d's Machine is shut down: the Node health rule keeps it from being a target.
	if !slices.ContainsFunc(w.LeftOut, func(left inspect.LeftOut) bool {
		return left.Node == "insp-d" && strings.Contains(left.Reason, "unhealthy: its Machine insp-d is Shutdown")
	}) {
		t.Errorf("web's left-out Nodes %+v do not name insp-d, whose Machine is shut down", w.LeftOut)
	}
	if w.LoadBalancer != lbspec.Name(web) || w.Type != string(networkingv1alpha1.LoadBalancerTypePublic) {
		t.Errorf("web's LoadBalancer: %q of type %q", w.LoadBalancer, w.Type)
	}
	if !slices.Equal(w.ServiceIPs, []string{webIP}) || !slices.Equal(w.LoadBalancerIPs, []string{webIP}) {
		t.Errorf("web's addresses: Service %v, LoadBalancer %v, want %s in both", w.ServiceIPs, w.LoadBalancerIPs, webIP)
	}
	if w.Owner == nil || w.Owner.Cluster != stack.ClusterName || w.Owner.UID != string(web.UID) {
		t.Errorf("web's owner: %+v", w.Owner)
	}
	wantTarget := inspect.Target{NetworkInterface: testenv.NetworkInterfaceName("insp-a"), Node: "insp-a", Routed: true}
	if w.TargetsFrom != inspect.TargetsFromSelector || len(w.Targets) != 1 || w.Targets[0].NetworkInterface != wantTarget.NetworkInterface ||
		w.Targets[0].Node != wantTarget.Node || !w.Targets[0].Routed {
		t.Errorf("web's targets from %s: %+v, want only %+v", w.TargetsFrom, w.Targets, wantTarget)
	}
	if len(w.Issues) != 0 {
		t.Errorf("web is in sync, but issues are reported: %+v", w.Issues)
	}

	tk := findService(t, report, taken.Name)
	if tk.LoadBalancer != "" {
		t.Errorf("taken is reported with LoadBalancer %s, which is another cluster's", tk.LoadBalancer)
	}
	wantIssues(t, "taken", tk.Issues, inspect.IssueOwnershipConflict)

	pending := findService(t, report, "insp-pending")
	wantIssues(t, "pending", pending.Issues, inspect.IssueLoadBalancerMissing)
}

func checkRoutes(t *testing.T, report *inspect.Report) {
	want := map[string]string{
		"10.244.1.0/24":     inspect.RoutePresent,
		"fd00:244:0:1::/64": inspect.RouteMissing,
		"10.244.9.0/24":     inspect.RouteExtra,
	}
	got := map[string]string{}
	for _, route := range report.Routes {
		if route.Node == "insp-a" {
			got[route.CIDR] = route.State
			if route.NetworkInterface != testenv.NetworkInterfaceName("insp-a") {
				t.Errorf("route %s of insp-a is on NetworkInterface %q", route.CIDR, route.NetworkInterface)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("insp-a's routes: %v, want %v", got, want)
	}
}

func checkOrphansAndConflicts(t *testing.T, report *inspect.Report, taken *corev1.Service) {
	// Its addresses are IronCore's to allocate, whenever it does.
	want := []inspect.Retained{{LoadBalancer: "insp-retained", Type: "Public", From: "default/insp-kept", At: "2026-11-01T10:00:00Z"}}
	retained := slices.Clone(report.Retained)
	for i := range retained {
		retained[i].IPs = nil
	}
	if !reflect.DeepEqual(retained, want) {
		t.Errorf("retained: %+v, want %+v (and it is no orphan)", report.Retained, want)
	}
	if len(report.Orphans) != 1 || report.Orphans[0].LoadBalancer != "insp-orphan" || report.Orphans[0].Reason != "the Service does not exist" {
		t.Errorf("orphans: %+v, want only insp-orphan, whose Service does not exist", report.Orphans)
	}
	if len(report.Conflicts) != 1 {
		t.Fatalf("conflicts: %+v, want one", report.Conflicts)
	}
	conflict := report.Conflicts[0]
	if conflict.LoadBalancer != lbspec.Name(taken) || conflict.ServiceName != taken.Name || conflict.Owner.Cluster != "other" {
		t.Errorf("conflict: %+v, want %s wanted by %s and owned by cluster other", conflict, lbspec.Name(taken), taken.Name)
	}
}

// checkTable looks for what an operator reads in the table: rows and their details.
func checkTable(t *testing.T, table string, taken *corev1.Service) {
	for _, pattern := range []string{
		`(?m)^NODES$`,
		`(?m)^insp-a\s+ironcore://tenant/insp-a\s+insp-a\s+pool-a/zone-a\s+Running\s+InternalIP=\S+,Hostname=insp-a\s+same\s+<none>$`,
		`(?m)^insp-b\s+<none>\s+insp-b \(by name\).*NoProviderID,Uninitialized$`,
		`(?m)^insp-c\s+ironcore://tenant/insp-gone\s.*MachineMissing$`,
		`(?m)^insp-d\s.*Shutdown\s+InternalIP=192\.0\.2\.1\s.*MachineShutdown,AddressesDiffer`,
		`(?m)^insp-e\s+<none>\s+insp-vm-e \(by hostname\)`,
		`(?m)^  insp-d: AddressesDiffer: the Node has InternalIP=192\.0\.2\.1, the Machine's NetworkInterfaces say InternalIP=`,
		`(?m)^LOADBALANCERS$`,
		`(?m)^default/insp-web\s+\w{32}\s+Public\s.*selector:insp-a-primary\(insp-a\)\s+lab/\S+\s+<none>$`,
		`(?m)^default/insp-taken\s+<none>\s.*OwnershipConflict$`,
		`(?m)^default/insp-pending\s+<none>\s.*LoadBalancerMissing$`,
		`(?m)^ROUTES$`,
		`(?m)^insp-a\s+insp-a-primary\s+10\.244\.1\.0/24\s+present$`,
		`(?m)^insp-a\s+insp-a-primary\s+fd00:244:0:1::/64\s+missing$`,
		`(?m)^insp-a\s+insp-a-primary\s+10\.244\.9\.0/24\s+extra$`,
		`(?m)^ORPHANED LOADBALANCERS\nLOADBALANCER.*\ninsp-orphan\s+default/insp-deleted\s.*the Service does not exist$`,
		`(?m)^RETAINED LOADBALANCERS\nLOADBALANCER.*\ninsp-retained\s+Public\s+\S+\s+default/insp-kept\s+2026-11-01T10:00:00Z$`,
		`(?m)^OWNERSHIP CONFLICTS\nLOADBALANCER.*\n` + lbspec.Name(taken) + `\s+default/insp-taken .*default/someone-else .* of cluster other$`,
	} {
		if !regexp.MustCompile(pattern).MatchString(table) {
			t.Errorf("the table has no match for %s", pattern)
		}
	}
}

// TestInspectRefusesMismatchedClusterName checks that the cluster name is resolved as the CCM
// resolves it: a --cluster-name other than the cloud-config's is an error, before any request.
func TestInspectRefusesMismatchedClusterName(t *testing.T) {
	opts := options()
	opts.ClusterName, opts.ClusterNameSet = "not-"+stack.ClusterName, true
	stack.IronCoreProxy.Reset()
	_, err := inspect.Run(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "--cluster-name") {
		t.Fatalf("error %v, want one about --cluster-name", err)
	}
	if counts := stack.IronCoreProxy.Counts(); len(counts) != 0 {
		t.Errorf("IronCore requests despite the configuration error: %+v", counts)
	}
}

// assertOnlyRead checks that every IronCore request since the proxy's reset only read.
// Discovery requests are counted by their HTTP method, GET. The cache's initial lists may
// arrive as watches (client-go's watch-list), so either counts as having read LoadBalancers.
func assertOnlyRead(t *testing.T) {
	t.Helper()
	counts := stack.IronCoreProxy.Counts()
	readLoadBalancers := false
	for _, count := range counts {
		switch strings.ToLower(count.Verb) {
		case "get":
		case "list", "watch":
			readLoadBalancers = readLoadBalancers || count.Resource == "loadbalancers.networking.ironcore.dev"
		default:
			t.Errorf("the inspection wrote to IronCore: %d %s %s", count.N, count.Verb, count.Resource)
		}
	}
	if !readLoadBalancers {
		t.Errorf("the proxy saw no read of LoadBalancers, so the check proves nothing: %+v", counts)
	}
}

func findNode(t *testing.T, report *inspect.Report, name string) inspect.Node {
	t.Helper()
	return find(t, "Node", report.Nodes, name, func(node inspect.Node) string { return node.Name })
}

func findService(t *testing.T, report *inspect.Report, name string) inspect.Service {
	t.Helper()
	return find(t, "Service", report.Services, name, func(service inspect.Service) string { return service.Name })
}

// find returns the reported item of the kind whose nameOf is name, failing the test without one.
func find[T any](t *testing.T, kind string, items []T, name string, nameOf func(T) string) T {
	t.Helper()
	for _, item := range items {
		if nameOf(item) == name {
			return item
		}
	}
	t.Fatalf("%s %s is not reported", kind, name)
	var none T
	return none
}

func wantIssues(t *testing.T, name string, issues []inspect.Issue, codes ...string) {
	t.Helper()
	for _, code := range codes {
		if !slices.ContainsFunc(issues, func(issue inspect.Issue) bool { return issue.Code == code && issue.Detail != "" }) {
			t.Errorf("%s: no %s issue among %+v", name, code, issues)
		}
	}
}

func waitFor(t *testing.T, what string, condition func(context.Context) error) {
	t.Helper()
	if err := testenv.WaitFor(context.Background(), waitTimeout, what, condition); err != nil {
		t.Fatal(err)
	}
}

// waitForNetworkInterface waits until the Machine has a state and its NetworkInterface is
// Available with an IP, and returns the interface.
func waitForNetworkInterface(t *testing.T, machineName string) *networkingv1alpha1.NetworkInterface {
	t.Helper()
	nic := &networkingv1alpha1.NetworkInterface{}
	waitFor(t, "Machine "+machineName+" and its NetworkInterface", func(ctx context.Context) error {
		machine := &computev1alpha1.Machine{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: machineName}, machine); err != nil {
			return err
		}
		if machine.Status.State != computev1alpha1.MachineStateRunning && machine.Status.State != computev1alpha1.MachineStateShutdown {
			return fmt.Errorf("Machine state %q", machine.Status.State)
		}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machineName)}, nic); err != nil {
			return err
		}
		if nic.Status.State != networkingv1alpha1.NetworkInterfaceStateAvailable || len(nic.Status.IPs) == 0 {
			return fmt.Errorf("NetworkInterface state %q, IPs %v", nic.Status.State, nic.Status.IPs)
		}
		return nil
	})
	return nic
}

// createNode registers a Node; one with a provider ID is initialized as the CCM would have
// initialized it (untainted, with zone and addresses).
func createNode(t *testing.T, name, providerID string, podCIDRs []string, zone string, addresses []corev1.NodeAddress) {
	t.Helper()
	ctx := context.Background()
	if _, err := stack.CreateNode(ctx, name, testenv.NodeOptions{ProviderID: providerID, PodCIDRs: podCIDRs}); err != nil {
		t.Fatal(err)
	}
	if providerID == "" {
		return
	}
	nodes := stack.TargetClientset.CoreV1().Nodes()
	node, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[corev1.LabelTopologyZone] = zone
	if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := stack.SetNodeAddresses(ctx, name, addresses); err != nil {
		t.Fatal(err)
	}
}

func createService(t *testing.T, name string) *corev1.Service {
	t.Helper()
	service, err := stack.CreateLoadBalancerService(context.Background(), name, testenv.ServiceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return service
}

// createLoadBalancer creates an IronCore LoadBalancer recording owner, as the CCM makes them
// in its default (selector) mode for owner's cluster.
// createRetainedLoadBalancer creates a LoadBalancer of the cluster retained after the Service
// from at the time at, as the CCM leaves it.
func createRetainedLoadBalancer(t *testing.T, name, cluster, from, at string) {
	t.Helper()
	_, err := stack.CreateRetainedLoadBalancer(context.Background(), name, cluster, map[string]string{keys.AnnotationRetainedFrom: from, keys.AnnotationRetainedAt: at})
	if err != nil {
		t.Fatal(err)
	}
}

func createLoadBalancer(t *testing.T, name string, owner inspect.Owner) *networkingv1alpha1.LoadBalancer {
	t.Helper()
	tcp := corev1.ProtocolTCP
	lb := &networkingv1alpha1.LoadBalancer{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: stack.Namespace,
			Name:      name,
			Labels: map[string]string{
				keys.LabelClusterName: owner.Cluster, keys.LabelServiceNamespace: owner.Namespace,
				keys.LabelServiceName: owner.Name, keys.LabelServiceUID: owner.UID,
			},
			Annotations: map[string]string{
				keys.AnnotationClusterName: owner.Cluster, keys.AnnotationServiceNamespace: owner.Namespace,
				keys.AnnotationServiceName: owner.Name, keys.AnnotationServiceUID: owner.UID,
			},
		},
		Spec: networkingv1alpha1.LoadBalancerSpec{
			Type:       networkingv1alpha1.LoadBalancerTypePublic,
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			NetworkRef: corev1.LocalObjectReference{Name: stack.Network},
			Ports:      []networkingv1alpha1.LoadBalancerPort{{Protocol: &tcp, Port: 80}},
			NetworkInterfaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				keys.LabelCluster: owner.Cluster, keys.LabelLoadBalancerTarget: owner.Cluster,
			}},
		},
	}
	if err := stack.IronCore.Client.Create(context.Background(), lb); err != nil {
		t.Fatal(err)
	}
	return lb
}

// waitForLoadBalancer waits until IronCore gave the LoadBalancer an address and routes it to
// the NetworkInterface, and returns the address.
func waitForLoadBalancer(t *testing.T, lb *networkingv1alpha1.LoadBalancer, nicName string) string {
	t.Helper()
	var ip string
	waitFor(t, "LoadBalancer "+lb.Name+" with an address and routing", func(ctx context.Context) error {
		current := &networkingv1alpha1.LoadBalancer{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), current); err != nil {
			return err
		}
		if len(current.Status.IPs) == 0 {
			return errors.New("no address yet")
		}
		ip = current.Status.IPs[0].String()
		routing := &networkingv1alpha1.LoadBalancerRouting{}
		if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(lb), routing); err != nil {
			return err
		}
		if !slices.ContainsFunc(routing.Destinations, func(d networkingv1alpha1.LoadBalancerDestination) bool {
			return d.TargetRef != nil && d.TargetRef.Name == nicName
		}) {
			return fmt.Errorf("routing destinations %+v", routing.Destinations)
		}
		return nil
	})
	return ip
}

func prefixValue(cidr string) networkingv1alpha1.PrefixSource {
	return networkingv1alpha1.PrefixSource{Value: &commonv1alpha1.IPPrefix{Prefix: netip.MustParsePrefix(cidr)}}
}
