package dryrun

import (
	"slices"
	"testing"
)

// TestAChangeIsSaidFieldByField: labels added and removed, a field changed, and a routing's
// destinations by target, in field order; what the API server keeps for itself is left out.
func TestAChangeIsSaidFieldByField(t *testing.T) {
	before := `{"metadata":{"resourceVersion":"1","labels":{"a":"1","b":"2"}},"spec":{"type":"Internal"},
		"destinations":[{"ip":"10.0.0.1","targetRef":{"name":"nic-a"}},{"ip":"10.0.0.2","targetRef":{"name":"nic-b"}}]}`
	after := `{"metadata":{"resourceVersion":"2","labels":{"a":"1","c":"3"}},"spec":{"type":"Public"},
		"destinations":[{"ip":"10.0.0.2","targetRef":{"name":"nic-b"}},{"ip":"10.0.0.3","targetRef":{"name":"nic-c"}}]}`
	want := []string{
		"destinations: 2 -> 2 targets; in: nic-c; out: nic-a",
		`metadata.labels.b: removed (was "2")`,
		`metadata.labels.c: added "3"`,
		`spec.type: "Internal" -> "Public"`,
	}
	got := diff([]byte(before), []byte(after))
	if !slices.Equal(got, want) {
		t.Errorf("diff\n%q\nwant\n%q", got, want)
	}
	if out := DestinationsOut(got); !slices.Equal(out, []string{"nic-a"}) {
		t.Errorf("the destinations out are %q, want nic-a", out)
	}
	if got := diff([]byte(before), []byte(before)); len(got) != 0 {
		t.Errorf("an unchanged object has changes %q", got)
	}
}

// TestConditionsAreComparedByType: a condition's change is said by its type, without the
// times that change on every write.
func TestConditionsAreComparedByType(t *testing.T) {
	before := `{"status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"1"},{"type":"NetworkUnavailable","status":"True","reason":"NoRoute","lastTransitionTime":"1"}]}}`
	after := `{"status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2"},{"type":"NetworkUnavailable","status":"False","reason":"RouteCreated","lastTransitionTime":"2"}]}}`
	want := []string{
		`status.conditions[NetworkUnavailable].reason: "NoRoute" -> "RouteCreated"`,
		`status.conditions[NetworkUnavailable].status: "True" -> "False"`,
	}
	if got := diff([]byte(before), []byte(after)); !slices.Equal(got, want) {
		t.Errorf("diff\n%q\nwant\n%q", got, want)
	}
}

// TestAnEventThatOnlyCountsDiffersIsTheSameEvent: an event's numbers (a delay, a count) do not
// make another event.
func TestAnEventThatOnlyCountsDiffersIsTheSameEvent(t *testing.T) {
	a := withoutNumbers([]byte(`keeping it for 2.501s more; checking again in 250ms`))
	b := withoutNumbers([]byte(`keeping it for 1.2s more; checking again in 1000ms`))
	if string(a) != string(b) || string(a) != `keeping it for #s more; checking again in #ms` {
		t.Errorf("%q and %q, want both %q", a, b, `keeping it for #s more; checking again in #ms`)
	}
}
