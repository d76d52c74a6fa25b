package docgen

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestCodeRecordsExactlyTheDocumentedEventReasons keeps docs/events.md honest: every event the
// CCM records has a documented reason and type, and every documented reason is recorded.
func TestCodeRecordsExactlyTheDocumentedEventReasons(t *testing.T) {
	emissions, err := ScanEmissions(repositoryRoot, "cmd", "internal", "pkg")
	if err != nil {
		t.Fatal(err)
	}
	if len(emissions) == 0 {
		t.Fatal("found no recorded events at all; the scanner is broken")
	}
	documented := map[string]EventReason{}
	for _, reason := range EventReasons() {
		documented[reason.Reason] = reason
	}
	recorded := map[string]bool{}
	for _, emission := range emissions {
		reason, known := documented[emission.Reason]
		switch {
		case emission.Reason == "":
			t.Errorf("%s: the reason %s is not a constant; record events with a reason constant documented in docgen.EventReasons, or carry it in a struct parameter (see ScanEmissions)", emission.Position, emission.Expression)
		case emission.Type == "":
			t.Errorf("%s: the type of the %s event is not corev1.EventTypeNormal or corev1.EventTypeWarning", emission.Position, emission.Reason)
		case !known:
			t.Errorf("%s: event reason %q is not documented: add it to docgen.EventReasons (internal/docgen/reasons.go) and run `go generate ./...`", emission.Position, emission.Reason)
		case reason.Type != emission.Type:
			t.Errorf("%s: event reason %q is recorded as %s but documented as %s in docgen.EventReasons", emission.Position, emission.Reason, emission.Type, reason.Type)
		}
		recorded[emission.Reason] = true
	}
	for _, reason := range EventReasons() {
		if !recorded[reason.Reason] {
			t.Errorf("event reason %q is documented in docgen.EventReasons but never recorded; remove it", reason.Reason)
		}
	}
}

func TestEventReasonsAreCompleteAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, reason := range EventReasons() {
		if seen[reason.Reason] {
			t.Errorf("event reason %q is documented twice", reason.Reason)
		}
		seen[reason.Reason] = true
		if reason.Type != corev1.EventTypeNormal && reason.Type != corev1.EventTypeWarning {
			t.Errorf("event reason %q has type %q", reason.Reason, reason.Type)
		}
		for field, value := range map[string]string{"Reason": reason.Reason, "Object": reason.Object, "Controller": reason.Controller, "When": reason.When, "Action": reason.Action} {
			if strings.TrimSpace(value) == "" {
				t.Errorf("event reason %q has no %s", reason.Reason, field)
			}
		}
	}
}

func TestScanEmissions(t *testing.T) {
	emissions, err := ScanEmissions("testdata/scan", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	want := []Emission{
		{Reason: "Literal", Type: "Warning", Position: "a/a.go:18", Expression: "ReasonLiteral"},
		{Reason: "PrefixedConcat", Type: "Normal", Position: "a/a.go:19", Expression: `reasonPrefix + "Concat"`},
		{Reason: "Imported", Type: "Warning", Position: "a/a.go:20", Expression: "b.ReasonImported"},
		{Reason: "Annotated", Type: "Warning", Position: "a/a.go:21", Expression: `"Annotated"`},
		{Reason: "", Type: "Warning", Position: "a/a.go:23", Expression: "name"},
		{Reason: "", Type: "Warning", Position: "a/a.go:38", Expression: "n.reason"},
		{Reason: "ImportedAliased", Type: "Warning", Position: "a/aliased.go:5", Expression: "ReasonAliased"},
		{Reason: "Carried", Type: "Warning", Position: "a/a.go:25", Expression: `"Carried"`},
		{Reason: "", Type: "Warning", Position: "a/a.go:26", Expression: "name"},
		{Reason: "CarriedElided", Type: "Warning", Position: "a/a.go:27", Expression: `"CarriedElided"`},
		{Reason: "ImportedAcross", Type: "Normal", Position: "a/a.go:40", Expression: `b.ReasonImported + "Across"`},
		{Reason: "CarriedFromB", Type: "Normal", Position: "b/b.go:13", Expression: `"CarriedFromB"`},
		{Reason: "Imported", Type: "Normal", Position: "b/b.go:13", Expression: "ReasonImported"},
	}
	if len(emissions) != len(want) {
		t.Fatalf("got %d emissions, want %d:\n%+v", len(emissions), len(want), emissions)
	}
	for i := range want {
		if emissions[i] != want[i] {
			t.Errorf("emission %d = %+v, want %+v", i, emissions[i], want[i])
		}
	}
}

func TestScanEmissionsNeedsAModule(t *testing.T) {
	if _, err := ScanEmissions(t.TempDir(), "."); err == nil {
		t.Fatal("want an error for a directory without go.mod")
	}
}
