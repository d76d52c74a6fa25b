package targetrules

import (
	"fmt"
	"slices"
	"testing"
	"time"

	commonv1alpha1 "github.com/ironcore-dev/ironcore/api/common/v1alpha1"
	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	networkingv1alpha1 "github.com/ironcore-dev/ironcore/api/networking/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cloudproviderapi "k8s.io/cloud-provider/api"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	"k8s.io/utils/ptr"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/keys"
)

func TestHealthCheck(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rules := Health{Enabled: true, ReadyGrace: time.Minute}
	ready := func(status corev1.ConditionStatus, ago time.Duration) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
		}
	}
	isReady := ready(corev1.ConditionTrue, time.Hour)
	both := func(changes ...func(*corev1.Node)) func(*corev1.Node) {
		return func(n *corev1.Node) {
			for _, change := range changes {
				change(n)
			}
		}
	}
	taint := func(key string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}} }
	}
	deleting := func(n *corev1.Node) { n.DeletionTimestamp = ptr.To(metav1.NewTime(now)) }
	uninitialized := func(n *corev1.Node) { n.Spec.ProviderID = "" }
	machine := func(state computev1alpha1.MachineState) *computev1alpha1.Machine {
		m := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m-uid"}}
		m.Status.State = state
		return m
	}
	running := machine(computev1alpha1.MachineStateRunning)
	machineDeleting := machine(computev1alpha1.MachineStateRunning)
	machineDeleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	available := nic("nic", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.1")
	nicDeleting := nic("gone", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.2")
	nicDeleting.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	detached := nic("detached", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.6")
	detached.Spec.MachineRef = nil
	elsewhere := nic("elsewhere", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.7")
	elsewhere.Spec.MachineRef.UID = "an-earlier-m"
	for _, tc := range []struct {
		name      string
		node      func(*corev1.Node)
		machine   *computev1alpha1.Machine
		nics      []*networkingv1alpha1.NetworkInterface
		target    bool
		kind      string
		recheckIn time.Duration
		// off is the kind with the Node's own health switched off.
		off string
	}{
		{name: "ready", node: isReady},
		{name: "ready, machine without state", node: isReady, machine: machine("")},
		{name: "never ready: no condition", node: func(*corev1.Node) {}, kind: KindNeverReady},
		{name: "never ready: no condition, even as a target", node: func(*corev1.Node) {}, target: true, kind: KindNeverReady},
		{name: "not ready, not a target: never added, however young", node: ready(corev1.ConditionFalse, time.Second), kind: KindNeverReady},
		{name: "not ready, not a target: never added, however old", node: ready(corev1.ConditionFalse, time.Hour), kind: KindNeverReady},
		{name: "not ready within grace keeps a target", node: ready(corev1.ConditionFalse, 20*time.Second), target: true, recheckIn: 40 * time.Second},
		{name: "unknown past grace", node: ready(corev1.ConditionUnknown, 61*time.Second), target: true, kind: KindNotReady},
		{name: "false at grace", node: ready(corev1.ConditionFalse, time.Minute), target: true, kind: KindNotReady},
		{name: "not initialized", node: both(isReady, uninitialized), kind: KindNotInitialized, off: KindNotInitialized},
		{name: "machine gone", node: isReady, machine: nil, kind: KindMachineGone, off: KindMachineGone},
		{name: "machine being deleted", node: isReady, machine: machineDeleting, kind: KindMachineDeleting, off: KindMachineDeleting},
		{name: "no network interface", node: isReady, nics: []*networkingv1alpha1.NetworkInterface{}, kind: KindNetworkInterface, off: KindNetworkInterface},
		{name: "network interface in error with addresses", node: isReady, kind: KindNetworkInterface, off: KindNetworkInterface,
			nics: []*networkingv1alpha1.NetworkInterface{nic("err", networkingv1alpha1.NetworkInterfaceStateError, "10.0.0.3")}},
		{name: "network interface pending", node: isReady, kind: KindNetworkInterface, off: KindNetworkInterface,
			nics: []*networkingv1alpha1.NetworkInterface{nic("pending", networkingv1alpha1.NetworkInterfaceStatePending, "10.0.0.4")}},
		{name: "network interface without address", node: isReady, kind: KindNetworkInterface, off: KindNetworkInterface,
			nics: []*networkingv1alpha1.NetworkInterface{nic("bare", networkingv1alpha1.NetworkInterfaceStateAvailable)}},
		{name: "network interface being deleted", node: isReady, nics: []*networkingv1alpha1.NetworkInterface{nicDeleting}, kind: KindNetworkInterface, off: KindNetworkInterface},
		{name: "network interface detached", node: isReady, nics: []*networkingv1alpha1.NetworkInterface{detached}, kind: KindNetworkInterface, off: KindNetworkInterface},
		{name: "network interface claimed by an earlier Machine of the name", node: isReady, nics: []*networkingv1alpha1.NetworkInterface{elsewhere},
			kind: KindNetworkInterface, off: KindNetworkInterface},
		{name: "one of two network interfaces serves", node: isReady,
			nics: []*networkingv1alpha1.NetworkInterface{nic("bare", networkingv1alpha1.NetworkInterfaceStateAvailable), available}},
		{name: "being deleted", node: both(isReady, deleting), kind: KindDeleting},
		{name: "autoscaler taint", node: both(isReady, taint("ToBeDeletedByClusterAutoscaler")), kind: KindAutoscaler},
		{name: "shutdown taint", node: both(isReady, taint("node.cloudprovider.kubernetes.io/shutdown")), kind: KindShutdown},
		{name: "cordoned still serves", node: both(isReady, taint(corev1.TaintNodeUnschedulable))},
		{name: "machine shut down", node: isReady, machine: machine(computev1alpha1.MachineStateShutdown), kind: KindMachineStopped},
		{name: "machine terminating", node: isReady, machine: machine(computev1alpha1.MachineStateTerminating), kind: KindMachineStopped},
		{name: "machine terminated", node: isReady, machine: machine(computev1alpha1.MachineStateTerminated), kind: KindMachineStopped},
		{name: "machine pending", node: isReady, machine: machine(computev1alpha1.MachineStatePending), kind: KindMachineState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{ProviderID: "ironcore://ns/m"}}
			tc.node(node)
			in := Inputs{Node: node, Machine: tc.machine, NetworkInterfaces: tc.nics, Target: tc.target}
			if tc.name != "machine gone" && in.Machine == nil {
				in.Machine = running
			}
			if tc.nics == nil {
				in.NetworkInterfaces = []*networkingv1alpha1.NetworkInterface{available}
			}
			verdict := rules.Check(in, now)
			if verdict.Kind != tc.kind || verdict.RecheckIn != tc.recheckIn {
				t.Fatalf("Check = %+v, want kind %q, recheck in %s", verdict, tc.kind, tc.recheckIn)
			}
			if (verdict.Kind == "") != (verdict.Reason == "") {
				t.Fatalf("a verdict has a reason exactly when it is unhealthy: %+v", verdict)
			}
			off := Health{ReadyGrace: time.Minute}.Check(in, now)
			if off.Kind != tc.off || off.RecheckIn != 0 {
				t.Fatalf("with the Node's own health off, Check = %+v, want kind %q", off, tc.off)
			}
		})
	}
}

// nic is a NetworkInterface in the state with the addresses.
func nic(name string, state networkingv1alpha1.NetworkInterfaceState, ips ...string) *networkingv1alpha1.NetworkInterface {
	n := &networkingv1alpha1.NetworkInterface{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.MachineRef = &commonv1alpha1.LocalUIDReference{Name: "m", UID: "m-uid"}
	n.Status.State = state
	for _, ip := range ips {
		n.Status.IPs = append(n.Status.IPs, commonv1alpha1.MustParseIP(ip))
	}
	return n
}

func TestServingNetworkInterfaces(t *testing.T) {
	detached := nic("detached", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.6")
	detached.Spec.MachineRef = nil
	got := ServingNetworkInterfaces(&computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m-uid"}}, []*networkingv1alpha1.NetworkInterface{
		detached,
		nic("available", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.1"),
		nic("error", networkingv1alpha1.NetworkInterfaceStateError, "10.0.0.2"),
		nic("pending", networkingv1alpha1.NetworkInterfaceStatePending, "10.0.0.3"),
		nic("no-state", "", "10.0.0.4"),
		nic("no-address", networkingv1alpha1.NetworkInterfaceStateAvailable),
		nic("dual", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.5", "fd00::5"),
	})
	var names []string
	for _, n := range got {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"available", "dual"}) {
		t.Fatalf("ServingNetworkInterfaces = %v, want [available dual]", names)
	}
}

// TestEveryNodeInputTriggers walks the Node fields the rules read: each change of one changes
// the verdict on a Node or whether the service controller passes it on, and NodeChanged reports
// it, so that the controller syncs again at once; changes of fields the rules do not read (a
// heartbeat, a cordon, another label) are not reported.
func TestEveryNodeInputTriggers(t *testing.T) {
	now := time.Now()
	readySince := func(status corev1.ConditionStatus, since time.Duration) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
				LastTransitionTime: metav1.NewTime(now.Add(-since)), LastHeartbeatTime: metav1.NewTime(now.Add(-time.Second))}}
		}
	}
	taint := func(key string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m-uid"}}
	machine.Status.State = computev1alpha1.MachineStateRunning
	nics := []*networkingv1alpha1.NetworkInterface{nic("nic", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.1")}
	rules := Health{Enabled: true, ReadyGrace: time.Minute}
	outcome := func(n *corev1.Node) string {
		verdict := rules.Check(Inputs{Node: n, Machine: machine, NetworkInterfaces: nics, Target: true}, now)
		return fmt.Sprintf("%s %s eligible=%t not candidate=%q/%q", verdict.Kind, verdict.RecheckIn, Eligible(n), rules.NotCandidate(n), Health{}.NotCandidate(n))
	}
	for _, tc := range []struct {
		name   string
		base   func(*corev1.Node)
		change func(*corev1.Node)
		input  bool
	}{
		{"provider ID cleared", readySince(corev1.ConditionTrue, time.Hour), func(n *corev1.Node) { n.Spec.ProviderID = "" }, true},
		{"being deleted", readySince(corev1.ConditionTrue, time.Hour), func(n *corev1.Node) { n.DeletionTimestamp = ptr.To(metav1.NewTime(now)) }, true},
		{"excluded by label", readySince(corev1.ConditionTrue, time.Hour), func(n *corev1.Node) {
			n.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: "true"}
		}, true},
		{"autoscaler taint", readySince(corev1.ConditionTrue, time.Hour), taint(servicecontroller.ToBeDeletedTaint), true},
		{"shutdown taint", readySince(corev1.ConditionTrue, time.Hour), taint(cloudproviderapi.TaintNodeShutdown), true},
		{"not Ready", readySince(corev1.ConditionTrue, time.Hour), readySince(corev1.ConditionFalse, 0), true},
		{"not Ready for longer", readySince(corev1.ConditionFalse, 20*time.Second), readySince(corev1.ConditionFalse, 2*time.Minute), true},
		{"a heartbeat", readySince(corev1.ConditionTrue, time.Hour), func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(now) }, false},
		{"cordoned", readySince(corev1.ConditionTrue, time.Hour), taint(corev1.TaintNodeUnschedulable), false},
		{"another label", readySince(corev1.ConditionTrue, time.Hour), func(n *corev1.Node) { n.Labels = map[string]string{"example.org/x": "y"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{ProviderID: "ironcore://ns/m"}}
			tc.base(base)
			changed := base.DeepCopy()
			tc.change(changed)
			if read := outcome(base) != outcome(changed); read != tc.input {
				t.Errorf("the outcome changes from %q to %q; the rules read the field: %t", outcome(base), outcome(changed), tc.input)
			}
			if got := NodeChanged(base, changed); got != tc.input {
				t.Errorf("NodeChanged = %t, want %t", got, tc.input)
			}
		})
	}
}

// TestEveryNetworkInterfaceInputTriggers walks the NetworkInterface fields the rule reads: each
// change of one turns a serving NetworkInterface into one that cannot serve, and
// NetworkInterfaceChanged reports it, so that the controllers sync again at once; changes of
// fields the rule does not read are not reported.
func TestEveryNetworkInterfaceInputTriggers(t *testing.T) {
	machine := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", UID: "m-uid"}}
	base := nic("nic", networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.1")
	for _, tc := range []struct {
		name   string
		change func(*networkingv1alpha1.NetworkInterface)
		input  bool
	}{
		{"detached", func(n *networkingv1alpha1.NetworkInterface) { n.Spec.MachineRef = nil }, true},
		{"claimed by another Machine", func(n *networkingv1alpha1.NetworkInterface) { n.Spec.MachineRef.Name = "other" }, true},
		{"being deleted", func(n *networkingv1alpha1.NetworkInterface) { n.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		{"not Available", func(n *networkingv1alpha1.NetworkInterface) {
			n.Status.State = networkingv1alpha1.NetworkInterfaceStateError
		}, true},
		{"no address", func(n *networkingv1alpha1.NetworkInterface) { n.Status.IPs = nil }, true},
		{"a label", func(n *networkingv1alpha1.NetworkInterface) { n.Labels = map[string]string{"example.org/x": "y"} }, false},
		{"an annotation", func(n *networkingv1alpha1.NetworkInterface) { n.Annotations = map[string]string{"example.org/x": "y"} }, false},
		{"a prefix", func(n *networkingv1alpha1.NetworkInterface) {
			n.Spec.Prefixes = []networkingv1alpha1.PrefixSource{{Value: commonv1alpha1.MustParseNewIPPrefix("10.244.0.0/24")}}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := base.DeepCopy()
			tc.change(changed)
			serves := len(ServingNetworkInterfaces(machine, []*networkingv1alpha1.NetworkInterface{changed})) == 1
			if serves == tc.input {
				t.Errorf("serves after the change: %t; the rule reads the field: %t", serves, tc.input)
			}
			if got := NetworkInterfaceChanged(base, changed); got != tc.input {
				t.Errorf("NetworkInterfaceChanged = %t, want %t", got, tc.input)
			}
		})
	}
}

func TestForeignNetworkInterface(t *testing.T) {
	labelled := func(name, cluster string) *networkingv1alpha1.NetworkInterface {
		n := nic(name, networkingv1alpha1.NetworkInterfaceStateAvailable, "10.0.0.1")
		if cluster != "" {
			n.Labels = map[string]string{keys.LabelCluster: cluster}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		nics []*networkingv1alpha1.NetworkInterface
		want string
	}{
		{"none", nil, ""},
		{"not labelled yet", []*networkingv1alpha1.NetworkInterface{labelled("a", "")}, ""},
		{"this cluster's", []*networkingv1alpha1.NetworkInterface{labelled("a", "mine")}, ""},
		{"another cluster's among them", []*networkingv1alpha1.NetworkInterface{labelled("a", "mine"), labelled("b", "theirs")},
			`NetworkInterface b belongs to cluster "theirs"`},
	} {
		if got := ForeignNetworkInterface(tc.nics, "mine"); got != tc.want {
			t.Errorf("%s: ForeignNetworkInterface = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestServingNodes(t *testing.T) {
	endpoint := func(node string, ready, serving, terminating *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
	}
	yes, no := ptr.To(true), ptr.To(false)
	slices := []*discoveryv1.EndpointSlice{
		{Endpoints: []discoveryv1.Endpoint{
			endpoint("ready", yes, yes, no),
			endpoint("not-ready", no, no, no),
			endpoint("draining", no, yes, yes),
			endpoint("drained", no, no, yes),
		}},
		{Endpoints: []discoveryv1.Endpoint{
			endpoint("unknown", nil, nil, nil),
			endpoint("old-writer", yes, nil, nil),
			endpoint("old-writer-not-ready", no, nil, nil),
			{Conditions: discoveryv1.EndpointConditions{Ready: yes}},
		}},
	}
	got := ServingNodes(slices)
	want := map[string]bool{"ready": true, "draining": true, "unknown": true, "old-writer": true}
	if len(got) != len(want) {
		t.Fatalf("ServingNodes = %v, want %v", got, want)
	}
	for node := range want {
		if !got[node] {
			t.Fatalf("ServingNodes = %v, want %v", got, want)
		}
	}
}

func TestChoose(t *testing.T) {
	healthy := func(node string) Candidate { return Candidate{Node: node} }
	sick := func(node string) Candidate {
		return Candidate{Node: node, Verdict: Verdict{Kind: KindNotReady, Reason: "not ready"}}
	}
	gone := func(node string) Candidate {
		return Candidate{Node: node, Verdict: Verdict{Kind: KindMachineGone, Reason: "gone"}}
	}
	for _, tc := range []struct {
		name       string
		candidates []Candidate
		local      bool
		serving    map[string]bool
		targets    []string
		unhealthy  int
		failedOpen bool
		noEndpoint bool
	}{
		{name: "cluster, all healthy", candidates: []Candidate{healthy("a"), healthy("b")}, targets: []string{"a", "b"}},
		{name: "cluster, one unhealthy", candidates: []Candidate{healthy("a"), sick("b")}, targets: []string{"a"}, unhealthy: 1},
		{name: "cluster, all unhealthy fails open", candidates: []Candidate{sick("a"), sick("b")}, targets: []string{"a", "b"}, unhealthy: 2, failedOpen: true},
		{name: "local, endpoint Nodes only", candidates: []Candidate{healthy("a"), healthy("b"), healthy("c")}, local: true,
			serving: map[string]bool{"b": true, "elsewhere": true}, targets: []string{"b"}},
		{name: "local, no endpoints targets every healthy Node", candidates: []Candidate{healthy("a"), sick("b")}, local: true,
			targets: []string{"a"}, unhealthy: 1, noEndpoint: true},
		{name: "local, endpoints only on unhealthy Nodes fail open to them", candidates: []Candidate{healthy("a"), sick("b"), sick("c")}, local: true,
			serving: map[string]bool{"b": true, "c": true}, targets: []string{"b", "c"}, unhealthy: 2, failedOpen: true},
		{name: "no candidates", local: true, noEndpoint: true},
		{name: "a Node that cannot serve is never a target, even failing open", candidates: []Candidate{sick("a"), gone("b")},
			targets: []string{"a"}, unhealthy: 2, failedOpen: true},
		{name: "only Nodes that cannot serve: no targets", candidates: []Candidate{gone("a")}, unhealthy: 1},
		// The routing's sync matches the targets to its Nodes by this order.
		{name: "targets keep the candidates' order", candidates: []Candidate{healthy("c"), sick("a"), healthy("b"), gone("d"), healthy("a2")},
			targets: []string{"c", "b", "a2"}, unhealthy: 2},
		{name: "targets failing open keep the candidates' order", candidates: []Candidate{sick("z"), gone("x"), sick("y")},
			targets: []string{"z", "y"}, unhealthy: 3, failedOpen: true},
		{name: "local, endpoints only on a Node that cannot serve: every other Node", candidates: []Candidate{healthy("a"), gone("b")}, local: true,
			serving: map[string]bool{"b": true}, targets: []string{"a"}, unhealthy: 1, noEndpoint: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			choice := Choose(tc.candidates, tc.local, tc.serving)
			if !slices.Equal(choice.Targets, tc.targets) || len(choice.Unhealthy) != tc.unhealthy ||
				choice.FailedOpen != tc.failedOpen || choice.NoLocalEndpoints != tc.noEndpoint {
				t.Fatalf("Choose = %+v", choice)
			}
		})
	}
}

// TestFailingOpenNeverBringsBackANodeThatCannotServe: when every Node that could serve a
// Service is unhealthy, the targets fail open to those that may still serve (not Ready, a
// Machine pending, the autoscaler's taint), never to one that certainly cannot.
func TestFailingOpenNeverBringsBackANodeThatCannotServe(t *testing.T) {
	for _, tc := range []struct {
		kind      string
		failsOpen bool
	}{
		{KindNotReady, true},
		{KindNeverReady, true},
		{KindMachineState, true},
		{KindAutoscaler, true},
		{KindNotInitialized, false},
		{KindMachineGone, false},
		{KindMachineDeleting, false},
		{KindNetworkInterface, false},
		{KindDeleting, false},
		{KindShutdown, false},
		{KindMachineStopped, false},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			notReady := Candidate{Node: "not-ready", Verdict: Verdict{Kind: KindNotReady, Reason: "not ready"}}
			other := Candidate{Node: tc.kind, Verdict: Verdict{Kind: tc.kind, Reason: tc.kind}}
			choice := Choose([]Candidate{notReady, other}, false, nil)
			want := []string{notReady.Node}
			if tc.failsOpen {
				want = append(want, other.Node)
			}
			if !choice.FailedOpen || !slices.Equal(choice.Targets, want) {
				t.Errorf("Choose = %+v, want failed open to %v", choice, want)
			}
		})
	}
}

// BenchmarkChoose chooses among 1,000 Nodes, one in ten unhealthy, as each routing's sync
// does at that size.
func BenchmarkChoose(b *testing.B) {
	candidates := make([]Candidate, 1000)
	for i := range candidates {
		candidates[i].Node = fmt.Sprintf("node-%04d", i)
		if i%10 == 0 {
			candidates[i].Verdict = Verdict{Kind: KindNotReady, Reason: "not ready"}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		Choose(candidates, false, nil)
	}
}

// Which Nodes the rules choose among: an excluded Node never; one being deleted or tainted for
// deletion only with the health rule on, which then finds it unhealthy.
func TestNotCandidate(t *testing.T) {
	deleting := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: ptr.To(metav1.Now())}}
	excluded := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{corev1.LabelNodeExcludeBalancers: ""}}}
	tainted := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: servicecontroller.ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}}}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		health  bool
		leftOut bool
	}{
		{"a plain Node", &corev1.Node{}, false, false},
		{"excluded, health rule on", excluded, true, true},
		{"excluded, health rule off", excluded, false, true},
		{"being deleted, health rule on", deleting, true, false},
		{"being deleted, health rule off", deleting, false, true},
		{"autoscaler taint, health rule on", tainted, true, false},
		{"autoscaler taint, health rule off", tainted, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if reason := (Health{Enabled: tc.health}).NotCandidate(tc.node); (reason != "") != tc.leftOut {
				t.Errorf("NotCandidate = %q, want left out: %t", reason, tc.leftOut)
			}
		})
	}
}

// An update of an EndpointSlice takes Nodes out when one of its Nodes had a serving endpoint and
// has none now; endpoints that only arrive, or move within a Node, take none out.
func TestNodesLeft(t *testing.T) {
	slice := func(endpoints ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Endpoints: endpoints}
	}
	on := func(node string, serving bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Serving: ptr.To(serving), Ready: ptr.To(serving)}}
	}
	for _, tc := range []struct {
		name      string
		old, now  *discoveryv1.EndpointSlice
		nodesLeft bool
	}{
		{"an endpoint arrives", slice(on("a", true)), slice(on("a", true), on("b", true)), false},
		{"a Node's second endpoint goes", slice(on("a", true), on("a", true)), slice(on("a", true)), false},
		{"a Node's last endpoint goes", slice(on("a", true), on("b", true)), slice(on("a", true)), true},
		{"a Node's endpoint stops serving", slice(on("a", true)), slice(on("a", false)), true},
		{"a Node's endpoint starts serving", slice(on("a", false)), slice(on("a", true)), false},
	} {
		if got := NodesLeft(tc.old, tc.now); got != tc.nodesLeft {
			t.Errorf("%s: NodesLeft = %t, want %t", tc.name, got, tc.nodesLeft)
		}
	}
}
