package providerid

import "testing"

func TestParseAcceptsWhatStringFormats(t *testing.T) {
	id := ID{Namespace: "tenant-a", Machine: "worker-0"}
	got, err := Parse(id.String())
	if err != nil {
		t.Fatalf("Parse(%q): %v", id.String(), err)
	}
	if got != id {
		t.Fatalf("Parse(%q) = %+v, want %+v", id.String(), got, id)
	}
	if id.String() != "ironcore://tenant-a/worker-0" {
		t.Fatalf("format changed: %q", id.String())
	}
}

func TestParseRejectsEverythingElse(t *testing.T) {
	for _, providerID := range []string{
		"",
		"worker-0",
		"aws:///eu-west-1a/i-0123",
		"ironcore:///worker-0",
		"ironcore://tenant-a/",
		"ironcore://tenant-a",
		"ironcore://tenant-a/worker-0/extra",
		"ironcore://Tenant/worker-0",
		"ironcore://tenant-a/worker_0",
		"ironcore://tenant-a/worker-0.example.com",
		"IRONCORE://tenant-a/worker-0",
	} {
		if got, err := Parse(providerID); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", providerID, got)
		}
	}
}
