package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the benchmark at a tiny size, so that it keeps working between real runs.
func TestSmoke(t *testing.T) {
	result, err := Run(context.Background(), Options{
		Nodes: 3, Services: 2, Latency: 50 * time.Millisecond, Idle: 0, NodeSyncPeriod: time.Minute,
		Command: DefaultCommand, Label: "smoke", Progress: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if result.NodeInitialization.Count != 3 || result.LoadBalancerReadiness.Count != 2 || result.RouteConvergence.Count != 3 {
		t.Fatalf("counts %d/%d/%d, want 3/2/3", result.NodeInitialization.Count, result.LoadBalancerReadiness.Count, result.RouteConvergence.Count)
	}
	if total(result.Requests.Convergence, true) == 0 {
		t.Error("no IronCore writes counted during convergence")
	}
	if result.CCM.PeakRSSMiB <= 0 || result.CCM.CPUSeconds <= 0 {
		t.Errorf("CCM usage %+v", result.CCM)
	}
	files, err := result.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		info, err := os.Stat(file)
		if err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", file, err)
		}
	}
	if md := result.Markdown(); !strings.Contains(md, "| Node initialized | 3 |") {
		t.Errorf("markdown:\n%s", md)
	}
}
