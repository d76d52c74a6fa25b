package ironcore

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

// TestALargerRequestGetsMoreTime checks the deadline of a request that is not a watch: a
// hung request holds the controller key it serves until it is given up, so the bound is
// short, and a request that sends a large routing gets more of it.
func TestALargerRequestGetsMoreTime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		body   int
		want   time.Duration
	}{
		{"a read", http.MethodGet, 0, 10 * time.Second},
		{"a write of 128 KiB", http.MethodPatch, 1 << 17, 11250 * time.Millisecond},
		{"a write of a MiB", http.MethodPatch, 1 << 20, 20 * time.Second},
		{"a write of 3 MiB", http.MethodPut, 3 << 20, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "https://ironcore/apis", bytes.NewReader(make([]byte, tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			if got := requestTimeout(req); got != tc.want {
				t.Errorf("requestTimeout = %s, want %s", got, tc.want)
			}
		})
	}
}
