package leasefence

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFence passes lease writes and other requests through the fence's Wrap to a local HTTP
// server, and checks what Check says at each time.
func TestFence(t *testing.T) {
	status := http.StatusOK
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer server.Close()
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	f := New("kube-system", "cloud-controller-manager", 10*time.Second)
	f.now = func() time.Time { return now }
	client := &http.Client{Transport: f.Wrap(http.DefaultTransport)}
	send := func(method, path string) {
		t.Helper()
		req, err := http.NewRequest(method, server.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	expect := func(refusal string) {
		t.Helper()
		err := f.Check()
		switch {
		case refusal == "" && err != nil:
			t.Fatalf("refused: %v", err)
		case refusal != "" && (err == nil || !strings.Contains(err.Error(), refusal)):
			t.Fatalf("got %v, want a refusal saying %q", err, refusal)
		}
	}
	const lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"

	expect("has not written the leader lease")
	send(http.MethodGet, lease+"/cloud-controller-manager")
	send(http.MethodPut, lease+"/another-lease")
	send(http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/default/leases/cloud-controller-manager")
	expect("has not written the leader lease") // reads and other leases are not renewals

	send(http.MethodPost, lease) // acquired by creating the lease
	expect("")
	now = now.Add(9 * time.Second)
	expect("")
	now = now.Add(time.Second)
	expect("last renewed the leader lease kube-system/cloud-controller-manager 10s ago")

	send(http.MethodPut, lease+"/cloud-controller-manager") // renewed
	expect("")
	status = http.StatusConflict // a renewal the API server refused: another replica holds it
	now = now.Add(5 * time.Second)
	send(http.MethodPut, lease+"/cloud-controller-manager")
	now = now.Add(5 * time.Second)
	expect("10s ago")
}
