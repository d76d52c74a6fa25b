package targetsapi_test

import (
	"errors"
	"testing"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetrules"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/targetsapi"
)

// TestNoticesClearedLeaveNothing: a Service whose events were all cleared takes no room.
func TestNoticesClearedLeaveNothing(t *testing.T) {
	var n targetsapi.Notices
	if !n.Changed("uid", targetsapi.ReasonTargetsIncomplete, "some Nodes skipped") {
		t.Error("a first event is not a change")
	}
	if n.Changed("uid", targetsapi.ReasonTargetsIncomplete, "some Nodes skipped") {
		t.Error("the same event again is a change")
	}
	n.Changed("uid", targetsapi.ReasonTargetsIncomplete, "")
	if got := n.Remembered(); got != 0 {
		t.Errorf("events of %d Services remembered, want 0", got)
	}
}

func TestSkippedNodesAreAnErrorOfTheirOwnKind(t *testing.T) {
	if err := targetsapi.Skipped(nil).Err(); err != nil {
		t.Errorf("no Node skipped gives %v", err)
	}
	err := targetsapi.Skipped{"Node a: no Machine", "Node b: no Machine"}.Err()
	if !errors.Is(err, targetrules.ErrNodesSkipped) || err.Error() != "not load balancer targets: Node a: no Machine; Node b: no Machine" {
		t.Errorf("two Nodes skipped give %v", err)
	}
}
