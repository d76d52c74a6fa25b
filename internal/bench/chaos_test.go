package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestChaosSmoke runs the churn-and-chaos scenario at a small size, in each target mode: two
// replicas, a leader killed and a leader paused, faults on both APIs, silent providers, a Node
// unhealthy and a hand edit per wave, and with faults off a Machine deleted under a Ready Node,
// a NetworkInterface in Error and a Node joining NotReady; it must break no invariant.
func TestChaosSmoke(t *testing.T) {
	for _, selecting := range []bool{false, true} {
		opts := ChaosOptions{
			Nodes: 3, Services: 24, Waves: 2, Disruptions: 1, FaultRate: 0.05, Seed: 3, Latency: 50 * time.Millisecond, Progress: os.Stderr,
			Selecting: selecting,
			// Whether Nodes unable to serve leave, not how fast: a loaded machine running the
			// tests with the race detector is no measure of that (make chaos is).
			Slack: 20 * time.Second,
		}
		t.Run(opts.TargetMode(), func(t *testing.T) { chaosSmoke(t, opts) })
	}
}

func chaosSmoke(t *testing.T, opts ChaosOptions) {
	result, err := RunChaos(context.Background(), opts)
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
	// Per wave, a Node leaves by the churn and one by its Machine deleted abruptly; one joins
	// Ready and one NotReady.
	if result.ServicesCreated != 24 || result.ServicesEdited != 12 || result.NodesJoined != 4 || result.NodesLeft != 4 || result.LeftNodesDeleted != 4 || result.PodCIDRsChecked != 3 {
		t.Errorf("created %d, edited %d Services, %d Nodes joined, %d left, %d deleted, %d pod CIDRs checked; want 24, 12, 4, 4, 4, 3",
			result.ServicesCreated, result.ServicesEdited, result.NodesJoined, result.NodesLeft, result.LeftNodesDeleted, result.PodCIDRsChecked)
	}
	handEdits := result.ClusterRoutingRepairSeconds
	if opts.Selecting {
		handEdits = result.LabelRepairSeconds
	}
	if result.HealthFlaps != 2 || len(result.FlapBackSeconds) != 2 || len(handEdits) != 2 {
		t.Errorf("%d health flaps (%d back), %d hand edits; want 2 each", result.HealthFlaps, len(result.FlapBackSeconds), len(handEdits))
	}
	if len(result.MachineGoneLeftSeconds) != 2 || len(result.NICErrorLeftSeconds) != 2 || len(result.NICErrorBackSeconds) != 2 || len(result.NotReadyJoinSeconds) != 2 {
		t.Errorf("%d Machines deleted, %d NetworkInterfaces in Error (%d back), %d Nodes joined NotReady; want 2 each",
			len(result.MachineGoneLeftSeconds), len(result.NICErrorLeftSeconds), len(result.NICErrorBackSeconds), len(result.NotReadyJoinSeconds))
	}
	if len(result.FaultsInjected) == 0 || len(result.Timeline) == 0 {
		t.Errorf("faults injected %v, %d samples", result.FaultsInjected, len(result.Timeline))
	}
	requireReported(t, result, "passed: no invariant broken")
}
