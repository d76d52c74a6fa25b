package lbtargets

import "testing"

// Only a change that can add a Node to targets waits for its wave: one that can serve now and
// could not before, or a new one. Any change that may take it out of some goes at once.
func TestOnlyJoiningNodesWait(t *testing.T) {
	serving := nodeState{eligible: true}
	unhealthy := nodeState{unhealthy: "NotReady", eligible: true}
	excluded := nodeState{}
	for _, tc := range []struct {
		name            string
		previous, state nodeState
		seen, joins     bool
	}{
		{"a new Node that can serve", nodeState{}, serving, false, true},
		{"a new Node that cannot", nodeState{}, unhealthy, false, false},
		{"healthy again", unhealthy, serving, true, true},
		{"included again", excluded, serving, true, true},
		{"turned unhealthy", serving, unhealthy, true, false},
		{"excluded from load balancers", serving, excluded, true, false},
		{"unhealthy for another reason", unhealthy, nodeState{unhealthy: "MachineGone", eligible: true}, true, false},
	} {
		if got := joins(tc.previous, tc.state, tc.seen); got != tc.joins {
			t.Errorf("%s: joins = %t, want %t", tc.name, got, tc.joins)
		}
	}
}
