package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	ipamv1alpha1 "github.com/ironcore-dev/ironcore/api/ipam/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv"
)

// ipamCCM starts the CCM with pod CIDR allocation configured by cloudConfig (YAML lines added
// to the stack's cloud-config) and the route controller on for clusterCIDRs.
func ipamCCM(t *testing.T, name, cloudConfig, clusterCIDRs string, crashCheck bool) *testenv.Process {
	t.Helper()
	path, err := stack.WriteCloudConfig(name, cloudConfig)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--cloud-config=" + path, "--configure-cloud-routes=true", "--cluster-cidr=" + clusterCIDRs}
	if !crashCheck {
		return startCCMWithoutCrashCheck(t, name, args...)
	}
	return startCCM(t, name, args...)
}

// podCIDRNIC is what a Machine's NetworkInterface holds for pod CIDRs: the cluster's entries
// by family, with the CIDR of the Prefix IronCore allocated for each, and its literal prefixes.
type podCIDRNIC struct {
	entries  map[corev1.IPFamily][]string
	literals []string
}

func readPodCIDRNIC(ctx context.Context, machine string) (podCIDRNIC, error) {
	nic := &networkingv1alpha1.NetworkInterface{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: testenv.NetworkInterfaceName(machine)}, nic); err != nil {
		return podCIDRNIC{}, err
	}
	state := podCIDRNIC{entries: map[corev1.IPFamily][]string{}}
	for i, source := range nic.Spec.Prefixes {
		if source.Value != nil {
			state.literals = append(state.literals, source.Value.String())
			continue
		}
		template := source.Ephemeral.PrefixTemplate
		if template.Labels[keys.LabelCluster] != stack.ClusterName || template.Labels[keys.LabelPodCIDR] == "" {
			continue
		}
		prefix := &ipamv1alpha1.Prefix{}
		cidr := "not allocated"
		err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace, Name: networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(nic.Name, i)}, prefix)
		switch {
		case err == nil && prefix.Spec.Prefix != nil && prefix.Status.Phase == ipamv1alpha1.PrefixPhaseAllocated:
			cidr = prefix.Spec.Prefix.String()
		case err != nil && !apierrors.IsNotFound(err):
			return podCIDRNIC{}, err
		}
		family := corev1.IPFamily(template.Labels[keys.LabelPodCIDR])
		state.entries[family] = append(state.entries[family], cidr)
	}
	return state, nil
}

// checkPodCIDRs checks a Node's pod CIDRs against its NetworkInterface: one entry per family,
// the Node's CIDRs exactly the allocated ones (IPv4 first), inside parents, and no literal copy
// of them (a second route).
func checkPodCIDRs(ctx context.Context, name string, families []corev1.IPFamily, parents []netip.Prefix) ([]string, error) {
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(node.Spec.PodCIDRs) == 0 {
		return nil, fmt.Errorf("node %s has no pod CIDRs yet", name)
	}
	state, err := readPodCIDRNIC(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(node.Spec.PodCIDRs) != len(families) || node.Spec.PodCIDR != node.Spec.PodCIDRs[0] {
		return nil, fmt.Errorf("node %s has pod CIDRs %v (podCIDR %s), want one of each of %v", name, node.Spec.PodCIDRs, node.Spec.PodCIDR, families)
	}
	for i, family := range families {
		cidr := netip.MustParsePrefix(node.Spec.PodCIDRs[i])
		if (family == corev1.IPv4Protocol) != cidr.Addr().Is4() {
			return nil, fmt.Errorf("node %s: pod CIDR %d is %s, want %s", name, i, cidr, family)
		}
		if entries := state.entries[family]; len(entries) != 1 || entries[0] != cidr.String() {
			return nil, fmt.Errorf("node %s: %s pod CIDR %s, its NetworkInterface's entries %v, want exactly it", name, family, cidr, entries)
		}
		if !slices.ContainsFunc(parents, func(parent netip.Prefix) bool { return parent.Overlaps(cidr) && parent.Bits() < cidr.Bits() }) {
			return nil, fmt.Errorf("node %s: pod CIDR %s is in none of the parents %v", name, cidr, parents)
		}
		if slices.Contains(state.literals, cidr.String()) {
			return nil, fmt.Errorf("node %s: pod CIDR %s is also a literal prefix (a second route)", name, cidr)
		}
	}
	if len(state.entries) != len(families) {
		return nil, fmt.Errorf("node %s: NetworkInterface has entries of %d families, want %d", name, len(state.entries), len(families))
	}
	return node.Spec.PodCIDRs, nil
}

// requireDisjoint fails the test if two pod CIDRs overlap.
func requireDisjoint(t *testing.T, byNode map[string][]string) {
	t.Helper()
	owner := map[netip.Prefix]string{}
	for name, cidrs := range byNode {
		for _, value := range cidrs {
			cidr := netip.MustParsePrefix(value)
			for other, otherName := range owner {
				if other.Overlaps(cidr) {
					t.Errorf("pod CIDR %s of %s overlaps %s of %s", cidr, name, other, otherName)
				}
			}
			owner[cidr] = name
		}
	}
}

// waitForNoPodCIDREntries waits until the Machine's NetworkInterface has no pod CIDR entry and
// IronCore has deleted every Prefix allocated for one.
func waitForNoPodCIDREntries(t *testing.T, machine string) {
	t.Helper()
	testenv.Await(t, context.Background(), waitTimeout, "the pod CIDRs of "+machine+" released", func(ctx context.Context) error {
		state, err := readPodCIDRNIC(ctx, machine)
		if err != nil {
			return err
		}
		if len(state.entries) > 0 {
			return fmt.Errorf("entries %v", state.entries)
		}
		return noPodCIDRPrefixesOf(ctx, machine)
	})
}

// noDeletingPodCIDRPrefixesOf fails while a pod CIDR Prefix of the Machine is being deleted.
func noDeletingPodCIDRPrefixesOf(ctx context.Context, machine string) error {
	prefixes := &ipamv1alpha1.PrefixList{}
	if err := stack.IronCore.Client.List(ctx, prefixes, client.InNamespace(stack.Namespace), client.HasLabels{keys.LabelPodCIDR}); err != nil {
		return err
	}
	for _, prefix := range prefixes.Items {
		if strings.HasPrefix(prefix.Name, testenv.NetworkInterfaceName(machine)+"-pf-") && !prefix.DeletionTimestamp.IsZero() {
			return fmt.Errorf("prefix %s is being deleted", prefix.Name)
		}
	}
	return nil
}

func noPodCIDRPrefixesOf(ctx context.Context, machine string) error {
	prefixes := &ipamv1alpha1.PrefixList{}
	if err := stack.IronCore.Client.List(ctx, prefixes, client.InNamespace(stack.Namespace), client.HasLabels{keys.LabelPodCIDR}); err != nil {
		return err
	}
	for _, prefix := range prefixes.Items {
		if strings.HasPrefix(prefix.Name, testenv.NetworkInterfaceName(machine)+"-pf-") {
			return fmt.Errorf("prefix %s (%v) is left", prefix.Name, prefix.Spec.Prefix)
		}
	}
	return nil
}

// TestPodCIDRsFromIronCoreIPAM runs single-stack IPv4 and IPv6-only clusters whose pod CIDRs
// IronCore allocates: each Node gets one CIDR from the parent, as an ephemeral prefix of its
// NetworkInterface that also serves as its route (no literal copy), and its network becomes
// available.
func TestPodCIDRsFromIronCoreIPAM(t *testing.T) {
	for _, tc := range []struct {
		name, config, parent, cidr string
		family                     corev1.IPFamily
		maskSize                   int
	}{
		{name: "IPv4", config: "podCIDRParentPrefix: pods-single-v4\npodCIDRMaskSize: 26\n", parent: "pods-single-v4", cidr: "10.200.0.0/16",
			family: corev1.IPv4Protocol, maskSize: 26},
		{name: "IPv6-only", config: "ipv6PodCIDRParentPrefix: pods-single-v6\n", parent: "pods-single-v6", cidr: "fd00:200::/56",
			family: corev1.IPv6Protocol, maskSize: 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			stack.CreateRootPrefixForTest(t, tc.parent, tc.cidr, nil)
			ipamCCM(t, "ccm-ipam-"+strings.ToLower(tc.name), tc.config, tc.cidr, true)
			names := []string{"ipam-" + strings.ToLower(tc.name) + "-1", "ipam-" + strings.ToLower(tc.name) + "-2"}
			for _, name := range names {
				runningMachine(t, name, testenv.MachineOptions{DualStack: true})
				createNode(t, name, testenv.NodeOptions{})
			}
			byNode := map[string][]string{}
			for _, name := range names {
				node := waitForNode(t, name, "Node "+name+" with pod CIDRs from IronCore and its network available", func(node *corev1.Node) error {
					cidrs, err := checkPodCIDRs(ctx, node.Name, []corev1.IPFamily{tc.family}, []netip.Prefix{netip.MustParsePrefix(tc.cidr)})
					if err != nil {
						return err
					}
					if bits := netip.MustParsePrefix(cidrs[0]).Bits(); bits != tc.maskSize {
						return fmt.Errorf("pod CIDR %s, want a /%d", cidrs[0], tc.maskSize)
					}
					if !networkAvailable(node) {
						return errors.New("network still unavailable")
					}
					return nil
				})
				byNode[name] = node.Spec.PodCIDRs
				waitForNodeEvent(t, name, "PodCIDRsAllocated", node.Spec.PodCIDRs[0])
			}
			requireDisjoint(t, byNode)
		})
	}
}

// TestFiftyDualStackNodesGetPodCIDRsFromIronCore has 50 dual-stack Nodes join at once with IPAM
// and routes on, beside two Nodes whose pod CIDRs another allocator set: every Node gets one
// IPv4 and one IPv6 CIDR, none overlapping, each routed once; the other two keep theirs, routed
// as literal prefixes, and are reported. Then a Node is deleted (its CIDRs are released and
// their Prefixes deleted) and comes back on the same Machine (one new allocation, no second).
func TestFiftyDualStackNodesGetPodCIDRsFromIronCore(t *testing.T) {
	ctx := context.Background()
	v4, v6 := netip.MustParsePrefix("10.201.0.0/16"), netip.MustParsePrefix("fd00:201::/56")
	stack.CreateRootPrefixForTest(t, "pods-dual-v4", v4.String(), nil)
	stack.CreateRootPrefixForTest(t, "pods-dual-v6", v6.String(), nil)
	ccm := ipamCCM(t, "ccm-ipam-dual", "podCIDRParentPrefix: pods-dual-v4\nipv6PodCIDRParentPrefix: pods-dual-v6\n",
		"10.0.0.0/8,fd00::/8", true)

	const count = 50
	names := runningMachines(t, "ipam-dual", count, testenv.MachineOptions{DualStack: true})
	others := runningMachines(t, "ipam-other", 2, testenv.MachineOptions{DualStack: true})
	if t.Failed() {
		return
	}

	started := time.Now()
	for i, name := range others {
		createNode(t, name, testenv.NodeOptions{PodCIDRs: podCIDRs(200 + i)})
	}
	for _, name := range names {
		createNode(t, name, testenv.NodeOptions{})
	}
	families := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	byNode := map[string][]string{}
	testenv.Await(t, ctx, 3*waitTimeout, "every Node with pod CIDRs from IronCore", func(ctx context.Context) error {
		for _, name := range names {
			if _, done := byNode[name]; done {
				continue
			}
			cidrs, err := checkPodCIDRs(ctx, name, families, []netip.Prefix{v4, v6})
			if err != nil {
				return err
			}
			byNode[name] = cidrs
		}
		return nil
	})
	t.Logf("%d dual-stack Nodes got their pod CIDRs from IronCore %s after they were created", count, time.Since(started).Round(time.Millisecond))
	requireDisjoint(t, byNode)

	testenv.Await(t, ctx, 2*waitTimeout, "every Node's network available, the other allocator's CIDRs routed as literal prefixes", func(ctx context.Context) error {
		for _, name := range append(slices.Clone(names), others...) {
			node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !networkAvailable(node) {
				return fmt.Errorf("node %s: network still unavailable", name)
			}
		}
		for i, name := range others {
			state, err := readPodCIDRNIC(ctx, name)
			if err != nil {
				return err
			}
			slices.Sort(state.literals)
			if want := podCIDRs(200 + i); !slices.Equal(state.literals, want) || len(state.entries) > 0 {
				return fmt.Errorf("node %s: literal prefixes %v and entries %v, want %v and none", name, state.literals, state.entries, want)
			}
		}
		return nil
	})
	for _, name := range others {
		waitForNodeEvent(t, name, "PodCIDRsFromAnotherAllocator", "kube-controller-manager")
	}
	// Routes reconciled since keep every prefix: none deleted, none duplicated.
	keptBefore := strings.Count(readLog(ccm), `: "keep"`)
	testenv.Await(t, ctx, waitTimeout, "two more route reconciles", func(context.Context) error {
		if kept := strings.Count(readLog(ccm), `: "keep"`) - keptBefore; kept < 2*2*(count+len(others)) {
			return fmt.Errorf("%d routes kept so far", kept)
		}
		return nil
	})
	for _, name := range names {
		if cidrs, err := checkPodCIDRs(ctx, name, families, []netip.Prefix{v4, v6}); err != nil || !slices.Equal(cidrs, byNode[name]) {
			t.Errorf("after the route reconciles, Node %s: pod CIDRs %v (%v), want %v", name, cidrs, err, byNode[name])
		}
	}
	if strings.Contains(readLog(ccm), "Deleting route") {
		t.Error("the route controller deleted a route")
	}

	// A deleted Node's CIDRs are released, and IronCore deletes their Prefixes.
	gone := names[0]
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForNoPodCIDREntries(t, gone)
	// The Node comes back on the same Machine: one allocation per family again.
	createNode(t, gone, testenv.NodeOptions{})
	waitForNode(t, gone, "Node "+gone+" with pod CIDRs again", func(node *corev1.Node) error {
		cidrs, err := checkPodCIDRs(ctx, node.Name, families, []netip.Prefix{v4, v6})
		if err == nil {
			byNode[gone] = cidrs
		}
		return err
	})
	requireDisjoint(t, byNode)

	// A Node deleted and registered again at once, racing the release of its entries: once the
	// Prefixes of released entries are gone, the Node's CIDRs are exactly what its
	// NetworkInterface routes.
	again := names[2]
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, again, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createNode(t, again, testenv.NodeOptions{})
	testenv.Await(t, ctx, 2*waitTimeout, "Node "+again+", registered again at once, with the pod CIDRs its NetworkInterface routes", func(ctx context.Context) error {
		if err := noDeletingPodCIDRPrefixesOf(ctx, again); err != nil {
			return err
		}
		cidrs, err := checkPodCIDRs(ctx, again, families, []netip.Prefix{v4, v6})
		if err == nil {
			byNode[again] = cidrs
		}
		return err
	})
	requireDisjoint(t, byNode)
	if strings.Contains(readLog(ccm), "Cannot release pod CIDRs") || strings.Contains(readLog(ccm), "Cannot sync pod CIDRs") {
		t.Error("the CCM logged a failed pod CIDR sync or release")
	}

	// A Node deleted with its Machine: the NetworkInterface goes with the Machine, and its
	// Prefixes with it (the garbage collector), whoever is first.
	removed := names[1]
	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, removed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := stack.IronCore.Client.Delete(ctx, &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: removed}}); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, 2*waitTimeout, "no pod CIDR Prefix of Machine "+removed+" left", func(ctx context.Context) error {
		return noPodCIDRPrefixesOf(ctx, removed)
	})
}

// TestPodCIDRAllocationSurvivesExhaustionAndAKill fills the parent, so that a Node's entry is
// added but cannot be allocated: the Node gets a Warning event naming the full parent and no
// pod CIDRs. The CCM is killed in the middle of that allocation, the range is extended with a
// second parent of the same labels, and the restarted CCM completes the allocation from the
// entry already there: no second entry, no leaked Prefix. A Node whose pod CIDRs are set by
// another allocator while its entry waits gets the entry released.
func TestPodCIDRAllocationSurvivesExhaustionAndAKill(t *testing.T) {
	ctx := context.Background()
	labels := map[string]string{"example.org/pod-cidrs": "exhaustion"}
	stack.CreateRootPrefixForTest(t, "pods-exhaust-a", "10.210.0.0/25", labels)
	config := "podCIDRParentPrefixLabels: {example.org/pod-cidrs: exhaustion}\npodCIDRMaskSize: 26\n"
	ccm := ipamCCM(t, "ccm-ipam-exhaust", config, "10.210.0.0/16", false)

	full := []string{"ipam-full-1", "ipam-full-2"}
	waiting, other := "ipam-waiting", "ipam-other-waiting"
	for _, name := range append(slices.Clone(full), waiting, other) {
		runningMachine(t, name, testenv.MachineOptions{})
	}
	byNode := map[string][]string{}
	for _, name := range full {
		createNode(t, name, testenv.NodeOptions{})
		node := waitForNode(t, name, "Node "+name+" with a pod CIDR", func(node *corev1.Node) error {
			_, err := checkPodCIDRs(ctx, node.Name, []corev1.IPFamily{corev1.IPv4Protocol}, []netip.Prefix{netip.MustParsePrefix("10.210.0.0/25")})
			return err
		})
		byNode[name] = node.Spec.PodCIDRs
	}
	requireDisjoint(t, byNode)

	createNode(t, waiting, testenv.NodeOptions{})
	createNode(t, other, testenv.NodeOptions{})
	waitForNodeEvent(t, waiting, "PodCIDRAllocationFailed", "no free /26 is left in pods-exhaust-a (10.210.0.0/25)")
	for _, name := range []string{waiting, other} {
		state, err := readPodCIDRNIC(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if entries := state.entries[corev1.IPv4Protocol]; len(entries) != 1 || entries[0] != "not allocated" {
			t.Fatalf("NetworkInterface of %s: entries %v, want one not allocated", name, state.entries)
		}
	}

	// Another allocator sets the other Node's pod CIDRs while its entry waits: the entry is
	// released.
	if _, err := stack.TargetClientset.CoreV1().Nodes().Patch(ctx, other, types.MergePatchType,
		[]byte(`{"spec":{"podCIDR":"10.244.77.0/24","podCIDRs":["10.244.77.0/24"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForNoPodCIDREntries(t, other)

	// The entry's Prefix, waiting: the restarted CCM must finish with this one.
	waitingPrefix := &ipamv1alpha1.Prefix{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKey{Namespace: stack.Namespace,
		Name: networkingv1alpha1.NetworkInterfacePrefixIPAMPrefixName(testenv.NetworkInterfaceName(waiting), 0)}, waitingPrefix); err != nil {
		t.Fatal(err)
	}
	ccm.Kill()
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, waiting, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.PodCIDRs) > 0 {
		t.Fatalf("Node %s got pod CIDRs %v from a full parent", waiting, node.Spec.PodCIDRs)
	}
	stack.CreateRootPrefixForTest(t, "pods-exhaust-b", "10.210.1.0/25", labels)
	ipamCCM(t, "ccm-ipam-exhaust-restarted", config, "10.210.0.0/16", true)
	node = waitForNode(t, waiting, "Node "+waiting+" with a pod CIDR from the added parent", func(node *corev1.Node) error {
		_, err := checkPodCIDRs(ctx, node.Name, []corev1.IPFamily{corev1.IPv4Protocol}, []netip.Prefix{netip.MustParsePrefix("10.210.1.0/25")})
		return err
	})
	byNode[waiting] = node.Spec.PodCIDRs
	requireDisjoint(t, byNode)
	finished := &ipamv1alpha1.Prefix{}
	if err := stack.IronCore.Client.Get(ctx, client.ObjectKeyFromObject(waitingPrefix), finished); err != nil || finished.UID != waitingPrefix.UID {
		t.Errorf("the waiting entry's Prefix was replaced (%v): the restart did not finish the allocation it found", err)
	}
	prefixes := &ipamv1alpha1.PrefixList{}
	if err := stack.IronCore.Client.List(ctx, prefixes, client.InNamespace(stack.Namespace), client.HasLabels{keys.LabelPodCIDR}); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(slices.Clone(full), waiting) {
		n := 0
		for _, prefix := range prefixes.Items {
			if strings.HasPrefix(prefix.Name, testenv.NetworkInterfaceName(name)+"-pf-") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("Machine %s has %d pod CIDR Prefixes, want 1", name, n)
		}
	}
}

// TestAPodCIDRWaitsForTheNodeThatHoldsIt: IronCore gives a pod CIDR back as soon as the
// NetworkInterface that held it is gone with its Machine, while the Node of that Machine may
// still be in the cluster (here it stays Ready, so nothing deletes it). A new Node to which
// IronCore allocates the same range must not get it until the old Node is gone: the parent has
// room for two pod CIDRs, and a third Node keeps the other.
func TestAPodCIDRWaitsForTheNodeThatHoldsIt(t *testing.T) {
	ctx := context.Background()
	stack.CreateRootPrefixForTest(t, "pods-reuse", "10.212.0.0/25", nil)
	ipamCCM(t, "ccm-ipam-reuse", "podCIDRParentPrefix: pods-reuse\npodCIDRMaskSize: 26\n", "10.212.0.0/16", true)

	keep, old, replacement := "ipam-reuse-keep", "ipam-reuse-old", "ipam-reuse-new"
	var cidr string
	for _, name := range []string{keep, old} {
		runningMachine(t, name, testenv.MachineOptions{})
		createNode(t, name, testenv.NodeOptions{})
		node := waitForNode(t, name, "Node "+name+" with a pod CIDR", func(node *corev1.Node) error {
			if len(node.Spec.PodCIDRs) != 1 {
				return fmt.Errorf("pod CIDRs %v", node.Spec.PodCIDRs)
			}
			return nil
		})
		cidr = node.Spec.PodCIDRs[0]
	}
	if err := stack.IronCore.Client.Delete(ctx, &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: stack.Namespace, Name: old}}); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, ctx, 2*waitTimeout, "no pod CIDR Prefix of Machine "+old+" left", func(ctx context.Context) error {
		return noPodCIDRPrefixesOf(ctx, old)
	})

	runningMachine(t, replacement, testenv.MachineOptions{})
	createNode(t, replacement, testenv.NodeOptions{})
	testenv.Await(t, ctx, 2*waitTimeout, "IronCore to allocate the range again, to "+replacement, func(ctx context.Context) error {
		state, err := readPodCIDRNIC(ctx, replacement)
		if err != nil {
			return err
		}
		if entries := state.entries[corev1.IPv4Protocol]; !slices.Equal(entries, []string{cidr}) {
			return fmt.Errorf("entries %v", state.entries)
		}
		return nil
	})
	waitForNodeEvent(t, replacement, "PodCIDRHeldByAnotherNode", "still the pod CIDR of Node "+old)
	node, err := stack.TargetClientset.CoreV1().Nodes().Get(ctx, replacement, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.PodCIDRs) > 0 {
		t.Fatalf("Node %s got the pod CIDRs %v while Node %s holds %s", replacement, node.Spec.PodCIDRs, old, cidr)
	}

	if err := stack.TargetClientset.CoreV1().Nodes().Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForNode(t, replacement, "Node "+replacement+" with the range, once Node "+old+" is gone", func(node *corev1.Node) error {
		if !slices.Equal(node.Spec.PodCIDRs, []string{cidr}) {
			return fmt.Errorf("pod CIDRs %v", node.Spec.PodCIDRs)
		}
		return nil
	})
}
