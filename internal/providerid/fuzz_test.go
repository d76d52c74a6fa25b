package providerid

import (
	"strings"
	"testing"
)

// FuzzParse feeds Parse arbitrary provider IDs: it must not panic, an ID it accepts must format
// back to the same text, and a rejection must say it is about the provider ID.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"ironcore://tenant/machine-1", "ironcore://ns/m", "ironcore:///m", "ironcore://ns/", "ironcore://ns/a/b",
		"aws:///eu-west-1a/i-0123", "ironcore://Tenant/m", "ironcore://ns/m\x00", "", "ironcore://" + strings.Repeat("a", 70) + "/m",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, providerID string) {
		id, err := Parse(providerID)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "provider ID ") {
				t.Fatalf("Parse(%q): the error does not name the provider ID: %v", providerID, err)
			}
			return
		}
		if id.String() != providerID {
			t.Fatalf("Parse(%q) = %+v, which formats as %q", providerID, id, id.String())
		}
	})
}
