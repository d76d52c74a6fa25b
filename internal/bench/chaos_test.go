package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestChaosSmoke runs the churn-and-chaos scenario at a small size: two replicas, a leader
// killed and a leader paused, faults on both APIs, silent providers, a Node unhealthy and a
// target label removed by hand per wave; it must break no invariant.
func TestChaosSmoke(t *testing.T) {
	result, err := RunChaos(context.Background(), ChaosOptions{
		Nodes: 3, Services: 24, Waves: 2, Disruptions: 1, FaultRate: 0.05, Seed: 3, Latency: 50 * time.Millisecond, Progress: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := result.Err(); err != nil {
		t.Errorf("%v\n%s", err, result.Markdown())
	}
	kinds := map[string]int{}
	for _, takeover := range result.Takeovers {
		kinds[takeover.Kind]++
		if takeover.TakeoverSeconds <= 0 {
			t.Errorf("takeover %+v", takeover)
		}
	}
	if kinds["kill"] != 1 || kinds["pause"] != 1 {
		t.Errorf("takeovers %v, want one kill and one pause", kinds)
	}
	if result.ServicesCreated != 24 || result.ServicesEdited != 12 || result.NodesJoined != 2 || result.NodesLeft != 2 || result.LeftNodesDeleted != 2 || result.PodCIDRsChecked != 3 {
		t.Errorf("created %d, edited %d Services, %d Nodes joined, %d left, %d pod CIDRs checked; want 24, 12, 2, 2, 3",
			result.ServicesCreated, result.ServicesEdited, result.NodesJoined, result.NodesLeft, result.PodCIDRsChecked)
	}
	if result.HealthFlaps != 2 || len(result.FlapBackSeconds) != 2 || len(result.LabelRepairSeconds) != 2 {
		t.Errorf("%d health flaps (%d back), %d target labels removed by hand; want 2 each",
			result.HealthFlaps, len(result.FlapBackSeconds), len(result.LabelRepairSeconds))
	}
	if len(result.FaultsInjected) == 0 || len(result.Timeline) == 0 {
		t.Errorf("faults injected %v, %d samples", result.FaultsInjected, len(result.Timeline))
	}
	files, err := result.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if info, err := os.Stat(file); err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", file, err)
		}
	}
	if md := result.Markdown(); !strings.Contains(md, "passed: no invariant broken") {
		t.Errorf("markdown:\n%s", md)
	}
}
