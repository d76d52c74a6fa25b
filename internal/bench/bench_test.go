package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the benchmark at a tiny size, so that it keeps working between real runs.
func TestSmoke(t *testing.T) {
	profiles := t.TempDir()
	result, err := Run(context.Background(), Options{
		Nodes: 3, Services: 2, Latency: 50 * time.Millisecond, Idle: 0, NodeSyncPeriod: time.Minute,
		Command: DefaultCommand, Label: "smoke", Progress: os.Stderr, ProfileDir: profiles,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The diagnostics say what the figures are made of.
	for file, want := range map[string]string{
		"timeline.tsv": "lbaddress/", "writes-ironcore.tsv": "\tpatch\tloadbalancers.networking.ironcore.dev\t",
		"writes-target.tsv": "\tnodes/status\t", "cpu.tsv": "\tetcd", "events.tsv": "\tService\tEnsuredLoadBalancer\tservice-controller\n", "ccm.log": "ironcore", "simulator.log": "",
		"heap.pb.gz": "", "metrics.txt": "rest_client_rate_limiter_duration_seconds",
	} {
		text, err := os.ReadFile(filepath.Join(profiles, file))
		if err != nil || !strings.Contains(string(text), want) {
			t.Errorf("%s holds no %q (%v)", file, want, err)
		}
	}
	if result.NodeInitialization.Count != 3 || result.LoadBalancerReadiness.Count != 2 || result.RouteConvergence.Count != 3 ||
		result.RoutingComplete.Count != 2 || result.Floor.Count != 2 {
		t.Fatalf("counts %d/%d/%d/%d/%d, want 3/2/3/2/2 (Nodes, Services, routes, routings, floor)", result.NodeInitialization.Count,
			result.LoadBalancerReadiness.Count, result.RouteConvergence.Count, result.RoutingComplete.Count, result.Floor.Count)
	}
	if result.FirstDestination.Count != 2 || result.FirstTraffic.Count != 2 || result.BurstFloor.Address.Count != 2 ||
		result.BurstFloor.FirstTraffic.Count != 2 || result.BurstFloor.RoutingComplete.Count != 2 || result.BurstFloor.LabelsWritten <= 0 || !result.BurstFloor.Routes {
		t.Fatalf("first destination %d, first traffic %d; burst floor %+v; want 2 of each", result.FirstDestination.Count,
			result.FirstTraffic.Count, result.BurstFloor)
	}
	if total(result.Requests.Convergence, true) == 0 || result.Requests.WritesPerNode == 0 || result.Requests.RequestsPerService == 0 {
		t.Errorf("IronCore requests during convergence: %d writes, %v per Node, %v per Service",
			total(result.Requests.Convergence, true), result.Requests.WritesPerNode, result.Requests.RequestsPerService)
	}
	// A routing write carries at least its name, namespace and a destination.
	if r := result.Requests; r.RoutingWrites < 2 || r.RoutingBytes < int64(100*r.RoutingWrites) || r.RoutingBytesPerNode <= 0 {
		t.Errorf("routing writes %d, %d bytes, %v bytes per Node; want at least one write of 100 bytes per Service",
			r.RoutingWrites, r.RoutingBytes, r.RoutingBytesPerNode)
	}
	if result.Unfinished != nil {
		t.Errorf("a converged run has unfinished objects %+v", result.Unfinished)
	}
	if result.Floor.Max <= 0 || result.AddressOverFloor.Max <= 0 {
		t.Errorf("floor %+v, address over floor %+v", result.Floor, result.AddressOverFloor)
	}
	if result.CCM.PeakRSSMiB <= 0 || result.CCM.PeakAnonMiB <= 0 || result.CCM.PeakFileMiB <= 0 || result.CCM.CPUSeconds <= 0 {
		t.Errorf("CCM usage %+v", result.CCM)
	}
	requireReported(t, result, "| Node initialized | 3 |", "| IronCore LoadBalancer alone (floor) | 2 |", "| Service's routing reaches every Node | 2 |")
}

// A run past its deadline is a result, not a failure: it says what was not done.
func TestSmokePastItsDeadline(t *testing.T) {
	result, err := Run(context.Background(), Options{
		Nodes: 3, Services: 2, Latency: 50 * time.Millisecond, Idle: 0, NodeSyncPeriod: time.Minute,
		Command: DefaultCommand, Label: "deadline", Progress: os.Stderr, Deadline: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	u := result.Unfinished
	if u == nil {
		t.Fatal("a run given a millisecond converged")
	}
	if done := result.NodeInitialization.Count + u.Nodes; done != 3 {
		t.Errorf("Nodes initialized %d and not %d, want 3 in all", result.NodeInitialization.Count, u.Nodes)
	}
	if done := result.LoadBalancerReadiness.Count + u.Addresses; done != 2 {
		t.Errorf("Services with an address %d and without %d, want 2 in all", result.LoadBalancerReadiness.Count, u.Addresses)
	}
	if !strings.Contains(result.Markdown(), "**Not converged**") {
		t.Errorf("the run's page does not say it did not converge:\n%s", result.Markdown())
	}
}

// TestChurnSmoke runs the endpoint churn at a tiny size, so that it keeps working between real
// runs.
func TestChurnSmoke(t *testing.T) {
	result, err := RunChurn(context.Background(), ChurnOptions{
		Nodes: 5, Services: 2, Rounds: 1, Latency: 50 * time.Millisecond, Quiet: time.Second,
		Command: DefaultCommand, Label: "smoke", Progress: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if result.Changes != 2 || result.Convergence.Count != 2 || result.RoutingWrites < 2 {
		t.Fatalf("%d changes, %d converged, %d routing writes; want 2, 2, at least 2", result.Changes, result.Convergence.Count, result.RoutingWrites)
	}
	requireReported(t, result, "| endpoint moves | 2 |")
}

// TestIPAMSmoke runs the pod CIDR allocation at a tiny size, so that it keeps working between
// real runs.
func TestIPAMSmoke(t *testing.T) {
	result, err := RunIPAM(context.Background(), IPAMOptions{
		Nodes: 4, Latency: 50 * time.Millisecond, Command: DefaultCommand, Label: "smoke", Progress: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if result.Allocation.Count != 4 || result.NetworkAvailable.Count != 4 || result.Overlaps != 0 || result.Misplaced != 0 {
		t.Fatalf("allocations %d, networks available %d, overlaps %d, misplaced %d; want 4, 4, 0, 0",
			result.Allocation.Count, result.NetworkAvailable.Count, result.Overlaps, result.Misplaced)
	}
	if result.Writes == 0 || result.PrefixAllocation.Count != 8 {
		t.Errorf("%d IronCore writes, %d pod CIDR Prefixes timed; want some and 8", result.Writes, result.PrefixAllocation.Count)
	}
	requireReported(t, result, "| overlapping pod CIDRs | 0 |")
}

// report is what every benchmark's result gives: its files and its page.
type report interface {
	Write(dir string) ([]string, error)
	Markdown() string
}

// requireReported writes the result's files, and fails the test for each that is missing or
// empty and for each row its page lacks.
func requireReported(t *testing.T, result report, rows ...string) {
	t.Helper()
	files, err := result.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if info, err := os.Stat(file); err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", file, err)
		}
	}
	md := result.Markdown()
	for _, row := range rows {
		if !strings.Contains(md, row) {
			t.Errorf("the page lacks %q:\n%s", row, md)
		}
	}
}
