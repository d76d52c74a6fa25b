package lbswitch

import "testing"

func TestNext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state State
		want  Phase
	}{
		{"one LoadBalancer of the asked type", State{}, None},
		{"one LoadBalancer of the asked type, ready and shown", State{SuccessorReady: true, ShowsSuccessor: true}, None},
		{"the current LoadBalancer is of the other type", State{CurrentOfOtherType: true}, Begin},
		{"the current one is of the other type, whatever else holds", State{CurrentOfOtherType: true, Replaced: 1, SuccessorReady: true, ShowsSuccessor: true}, Begin},
		{"the successor has no addresses or destination yet", State{Replaced: 1}, Prepare},
		{"the Service shows no successor address before it is ready", State{Replaced: 1, ShowsSuccessor: true}, Prepare},
		{"the successor is ready, the Service shows the old addresses", State{Replaced: 1, SuccessorReady: true}, HandOver},
		{"the Service shows the successor's addresses", State{Replaced: 1, SuccessorReady: true, ShowsSuccessor: true}, Release},
		{"two replaced LoadBalancers are released together", State{Replaced: 2, SuccessorReady: true, ShowsSuccessor: true}, Release},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.state); got != tc.want {
				t.Errorf("Next(%+v) = %s, want %s", tc.state, got, tc.want)
			}
		})
	}
}
