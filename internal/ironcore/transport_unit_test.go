package ironcore

import (
	"bytes"
	"net/http"
	"testing"
	"time"
)

// TestALargerRequestGetsMoreTime checks the deadline of a request that is not a watch: a
// hung request holds the controller key it serves until it is given up, so the bound is
// short, a request that sends a large routing gets more of it, and a list keeps its own.
func TestALargerRequestGetsMoreTime(t *testing.T) {
	const (
		routingsPath = "/apis/networking.ironcore.dev/v1alpha1/namespaces/tenant/loadbalancerroutings"
		routingPath  = routingsPath + "/a"
	)
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   int
		want   time.Duration
	}{
		{"a read", http.MethodGet, routingPath, 0, 10 * time.Second},
		{"a list", http.MethodGet, routingsPath, 0, 30 * time.Second},
		{"a write of 128 KiB", http.MethodPatch, routingPath, 1 << 17, 11250 * time.Millisecond},
		{"a write of a MiB", http.MethodPatch, routingPath, 1 << 20, 20 * time.Second},
		{"a write of 3 MiB", http.MethodPut, routingPath, 3 << 20, 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "https://ironcore"+tc.path, bytes.NewReader(make([]byte, tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			if got := bound(nil).(*boundedTransport).timeoutOf(req); got != tc.want {
				t.Errorf("timeoutOf = %s, want %s", got, tc.want)
			}
		})
	}
}
