package targetrules

import (
	"slices"
	"testing"
	"time"

	computev1alpha1 "github.com/ironcore-dev/ironcore/api/compute/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestHealthCheck(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rules := Health{Enabled: true, ReadyGrace: time.Minute}
	ready := func(status corev1.ConditionStatus, ago time.Duration) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-ago))}}
		}
	}
	taint := func(key string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}} }
	}
	deleting := func(n *corev1.Node) { n.DeletionTimestamp = ptr.To(metav1.NewTime(now)) }
	machine := func(state computev1alpha1.MachineState) *computev1alpha1.Machine {
		m := &computev1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
		m.Status.State = state
		return m
	}
	for _, tc := range []struct {
		name      string
		node      func(*corev1.Node)
		machine   *computev1alpha1.Machine
		kind      string
		recheckIn time.Duration
	}{
		{name: "no conditions", node: func(*corev1.Node) {}},
		{name: "ready", node: ready(corev1.ConditionTrue, time.Hour), machine: machine(computev1alpha1.MachineStateRunning)},
		{name: "not ready within grace", node: ready(corev1.ConditionFalse, 20*time.Second), recheckIn: 40 * time.Second},
		{name: "unknown past grace", node: ready(corev1.ConditionUnknown, 61*time.Second), kind: KindNotReady},
		{name: "false at grace", node: ready(corev1.ConditionFalse, time.Minute), kind: KindNotReady},
		{name: "being deleted", node: deleting, kind: KindDeleting},
		{name: "autoscaler taint", node: taint("ToBeDeletedByClusterAutoscaler"), kind: KindAutoscaler},
		{name: "shutdown taint", node: taint("node.cloudprovider.kubernetes.io/shutdown"), kind: KindShutdown},
		{name: "cordoned still serves", node: taint(corev1.TaintNodeUnschedulable)},
		{name: "machine shut down", node: ready(corev1.ConditionTrue, time.Hour), machine: machine(computev1alpha1.MachineStateShutdown), kind: KindMachineState},
		{name: "machine terminating", node: func(*corev1.Node) {}, machine: machine(computev1alpha1.MachineStateTerminating), kind: KindMachineState},
		{name: "machine pending", node: func(*corev1.Node) {}, machine: machine(computev1alpha1.MachineStatePending)},
		{name: "machine without state", node: func(*corev1.Node) {}, machine: machine("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
			tc.node(node)
			verdict := rules.Check(node, tc.machine, now)
			if verdict.Kind != tc.kind || verdict.RecheckIn != tc.recheckIn {
				t.Fatalf("Check = %+v, want kind %q, recheck in %s", verdict, tc.kind, tc.recheckIn)
			}
			if (verdict.Kind == "") != (verdict.Reason == "") {
				t.Fatalf("a verdict has a reason exactly when it is unhealthy: %+v", verdict)
			}
			off := Health{ReadyGrace: time.Minute}.Check(node, tc.machine, now)
			if !off.Healthy() || off.RecheckIn != 0 {
				t.Fatalf("with the rule off, Check = %+v", off)
			}
		})
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
