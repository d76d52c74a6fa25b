package bench

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

func TestParseStatReadsANameWithSpacesAndParentheses(t *testing.T) {
	stat := "4242 (kube (api) server) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 12 0 1000 0 0"
	command, ticks, ok := parseStat(stat)
	if !ok || command != "kube (api) server" || ticks != 1234+567 {
		t.Fatalf("parseStat = %q, %d, %v; want %q, %d, true", command, ticks, ok, "kube (api) server", 1234+567)
	}
	if _, _, ok := parseStat("4242 (short) S 1 2"); ok {
		t.Fatal("parseStat accepted a line without the CPU fields")
	}
}

func TestWriteCPUGivesEachProcessItsOwnUseMostFirst(t *testing.T) {
	before := processCPU{1: {command: "etcd", ticks: 100}, 2: {command: "ccm", ticks: 50}, 3: {command: "idle", ticks: 7}, 4: {command: "old", ticks: 900}}
	after := processCPU{1: {command: "etcd", ticks: 350}, 2: {command: "ccm", ticks: 550}, 3: {command: "idle", ticks: 7},
		// A process that started during the burst, and one whose pid was reused meanwhile.
		5: {command: "new", ticks: 30}, 4: {command: "reused", ticks: 20}}
	var out strings.Builder
	if err := writeCPU(&out, before, after); err != nil {
		t.Fatal(err)
	}
	want := "cpu_seconds\tpid\tcommand\n5.00\t2\tccm\n2.50\t1\tetcd\n0.30\t5\tnew\n0.20\t4\treused\n"
	if out.String() != want {
		t.Fatalf("writeCPU wrote\n%s\nwant\n%s", out.String(), want)
	}
}

func TestTheTimelineGivesEveryKeyAndLeavesUndoneOnesOpen(t *testing.T) {
	t0 := time.Now()
	s := newStopwatch(2)
	s.started["service/b"] = t0.Add(time.Second)
	s.started["node/a"] = t0
	s.finished["node/a"] = t0.Add(2500 * time.Millisecond)
	var out strings.Builder
	if err := s.writeTimeline(&out, t0); err != nil {
		t.Fatal(err)
	}
	want := "key\tcreated\tdone\nnode/a\t0.000\t2.500\nservice/b\t1.000\t\n"
	if out.String() != want {
		t.Fatalf("writeTimeline wrote\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	writes := []apiproxy.Write{{At: t0.Add(1500 * time.Millisecond), Verb: "patch", Resource: "loadbalancers.networking.ironcore.dev", Name: "x", Status: 200, Bytes: 312, Took: 250 * time.Millisecond}}
	if err := writeWrites(&out, writes, t0); err != nil {
		t.Fatal(err)
	}
	if want := "at\tverb\tresource\tname\tstatus\tbytes\ttook\n1.500\tpatch\tloadbalancers.networking.ironcore.dev\tx\t200\t312\t0.250\n"; out.String() != want {
		t.Fatalf("writeWrites wrote\n%s\nwant\n%s", out.String(), want)
	}
}

func TestEventReasonsSumOccurrencesMostFirst(t *testing.T) {
	event := func(kind, reason, source string, count int32) corev1.Event {
		return corev1.Event{Type: corev1.EventTypeNormal, Reason: reason, Count: count,
			InvolvedObject: corev1.ObjectReference{Kind: kind}, Source: corev1.EventSource{Component: source}}
	}
	events := []corev1.Event{
		event("Service", "EnsuredLoadBalancer", "service-controller", 1),
		event("Node", "Synced", "cloud-node-controller", 1),
		event("Service", "UpdatedLoadBalancer", "service-controller", 4),
		event("Service", "EnsuredLoadBalancer", "service-controller", 2),
	}
	var out strings.Builder
	if err := writeEventReasons(&out, events); err != nil {
		t.Fatal(err)
	}
	want := "occurrences\tevents\ttype\tkind\treason\tsource\n" +
		"4\t1\tNormal\tService\tUpdatedLoadBalancer\tservice-controller\n" +
		"3\t2\tNormal\tService\tEnsuredLoadBalancer\tservice-controller\n" +
		"1\t1\tNormal\tNode\tSynced\tcloud-node-controller\n"
	if out.String() != want {
		t.Fatalf("writeEventReasons wrote\n%s\nwant\n%s", out.String(), want)
	}
}
