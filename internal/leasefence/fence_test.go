package leasefence

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

const leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"

// echo answers every request with status and the request's body, as the API server answers a
// create with the object it created.
func echo(t *testing.T, status *int) *httptest.Server {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(*status)
		_, _ = io.Copy(w, r.Body)
	}))
	t.Cleanup(server.Close)
	return server
}

// leaseBody encodes a Lease named name in mediaType, as the leader election's client would.
func leaseBody(t *testing.T, name, mediaType string) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(clientgoscheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	encoder := clientgoscheme.Codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion)
	body, err := runtime.Encode(encoder, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// send sends a request with body through client and returns the response's body.
func send(t *testing.T, client *http.Client, method, url, mediaType string, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mediaType)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	read, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return read
}

// expect checks what Deadline says: nothing if refusal is empty, else a refusal saying it.
func expect(t *testing.T, f *Fence, refusal string) {
	t.Helper()
	_, err := f.Deadline()
	switch {
	case refusal == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case refusal != "" && (err == nil || !strings.Contains(err.Error(), refusal)):
		t.Fatalf("got %v, want a refusal saying %q", err, refusal)
	}
}

// TestFence passes lease writes and other requests through the fence's Wrap to a local HTTP
// server, and checks what Check and Deadline say at each time.
func TestFence(t *testing.T) {
	status := http.StatusOK
	server := echo(t, &status)
	now := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	f := New("kube-system", "cloud-controller-manager", 10*time.Second, 15*time.Second)
	clock := reading{mono: time.Hour, wall: now, boot: 2 * time.Hour}
	f.clock = func() reading { return clock }
	advance := func(d time.Duration) {
		now = now.Add(d)
		clock = reading{mono: clock.mono + d, wall: now, boot: clock.boot + d}
	}
	client := &http.Client{Transport: f.Wrap(http.DefaultTransport)}
	const json = runtime.ContentTypeJSON
	own := leaseBody(t, "cloud-controller-manager", json)

	expect(t, f, "has not written the leader lease")
	send(t, client, http.MethodGet, server.URL+leases+"/cloud-controller-manager", json, nil)
	send(t, client, http.MethodPut, server.URL+leases+"/another-lease", json, leaseBody(t, "another-lease", json))
	send(t, client, http.MethodPut, server.URL+"/apis/coordination.k8s.io/v1/namespaces/default/leases/cloud-controller-manager", json, own)
	expect(t, f, "has not written the leader lease") // reads and other leases are not renewals

	acquired := now
	send(t, client, http.MethodPost, server.URL+leases, json, own) // acquired by creating the lease
	expect(t, f, "")
	advance(9 * time.Second)
	if deadline, err := f.Deadline(); err != nil || !deadline.Equal(acquired.Add(10*time.Second)) {
		t.Fatalf("Deadline() = %v, %v; want the acquisition plus the renew deadline, %v", deadline, err, acquired.Add(10*time.Second))
	}
	advance(time.Second)
	expect(t, f, "last renewed the leader lease kube-system/cloud-controller-manager 10s ago")
	if deadline, err := f.Deadline(); err == nil {
		t.Fatalf("Deadline() = %v at the deadline, want a refusal", deadline)
	}

	send(t, client, http.MethodPut, server.URL+leases+"/cloud-controller-manager", json, own) // renewed
	expect(t, f, "")
	if deadline, _ := f.Deadline(); !deadline.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("Deadline() = %v after a renewal, want %v", deadline, now.Add(10*time.Second))
	}
	status = http.StatusConflict // a renewal the API server refused: another replica holds it
	advance(5 * time.Second)
	send(t, client, http.MethodPut, server.URL+leases+"/cloud-controller-manager", json, own)
	advance(5 * time.Second)
	expect(t, f, "10s ago")
}

// TestACreateOpensTheFenceOnlyForItsLease creates, in the namespace of the fence's lease,
// another lease (as leader migration does), then the fence's own, in each encoding the leader
// election's client may use: only the second opens the fence, and the caller reads each
// created lease whole.
func TestACreateOpensTheFenceOnlyForItsLease(t *testing.T) {
	for _, mediaType := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		t.Run(mediaType, func(t *testing.T) {
			status := http.StatusCreated
			server := echo(t, &status)
			f := New("kube-system", "cloud-controller-manager", 10*time.Second, 15*time.Second)
			client := &http.Client{Transport: f.Wrap(http.DefaultTransport)}

			other := leaseBody(t, "cloud-provider-extraction-migration", mediaType)
			if read := send(t, client, http.MethodPost, server.URL+leases, mediaType, other); !bytes.Equal(read, other) {
				t.Fatalf("the caller read %q, want the created lease %q", read, other)
			}
			expect(t, f, "has not written the leader lease")

			own := leaseBody(t, "cloud-controller-manager", mediaType)
			if read := send(t, client, http.MethodPost, server.URL+leases, mediaType, own); !bytes.Equal(read, own) {
				t.Fatalf("the caller read %q, want the created lease %q", read, own)
			}
			expect(t, f, "")
		})
	}
}

// TestAClockThatStoodStillDoesNotHoldTheFenceOpen pauses the process past the renew deadline
// with one clock standing still each time, as the monotonic clock does through a suspension of
// the machine, or the monotonic and boot-time clocks through a pause of a virtual machine that
// only the wall clock learns of: the fence refuses as after a pause every clock saw.
func TestAClockThatStoodStillDoesNotHoldTheFenceOpen(t *testing.T) {
	renewed := reading{mono: time.Minute, wall: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC), boot: time.Hour}
	const pause = 30 * time.Second
	for _, tc := range []struct {
		name string
		now  reading
	}{
		{"every clock counted the pause", reading{mono: renewed.mono + pause, wall: renewed.wall.Add(pause), boot: renewed.boot + pause}},
		{"the monotonic clock stood still", reading{mono: renewed.mono + time.Second, wall: renewed.wall.Add(pause), boot: renewed.boot + pause}},
		{"only the wall clock counted the pause", reading{mono: renewed.mono + time.Second, wall: renewed.wall.Add(pause), boot: renewed.boot + time.Second}},
		{"only the boot-time clock counted the pause", reading{mono: renewed.mono + time.Second, wall: renewed.wall.Add(time.Second), boot: renewed.boot + pause}},
		{"the wall clock was set back", reading{mono: renewed.mono + pause, wall: renewed.wall.Add(-time.Hour), boot: renewed.boot + pause}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New("kube-system", "cloud-controller-manager", 10*time.Second, 15*time.Second)
			f.renewed = renewed
			f.clock = func() reading { return tc.now }
			expect(t, f, "last renewed the leader lease kube-system/cloud-controller-manager 30s ago")
		})
	}

	// Within the deadline by every clock, the deadline is what the clock that counted most
	// leaves: here the wall clock, 4 s ahead.
	f := New("kube-system", "cloud-controller-manager", 10*time.Second, 15*time.Second)
	f.renewed = renewed
	now := reading{mono: renewed.mono + 2*time.Second, wall: renewed.wall.Add(6 * time.Second), boot: renewed.boot + 2*time.Second}
	f.clock = func() reading { return now }
	if deadline, err := f.Deadline(); err != nil || !deadline.Equal(now.wall.Add(4*time.Second)) {
		t.Fatalf("Deadline() = %v, %v; want 4s after now by the wall clock, %v", deadline, err, now.wall.Add(4*time.Second))
	}
}

// TestTheMachinesClocksAreRead checks that the clocks the fence reads in production give
// readings: a boot-time clock that read zero would count for nothing.
func TestTheMachinesClocksAreRead(t *testing.T) {
	clock := newClock()
	first := clock()
	second := clock()
	if first.wall.IsZero() || second.mono < first.mono {
		t.Fatalf("readings %+v then %+v", first, second)
	}
	if goruntime.GOOS == "linux" && (first.boot == 0 || second.boot < first.boot) {
		t.Fatalf("the boot-time clock read %s then %s", first.boot, second.boot)
	}
}

// TestUnfencedWrites lists which writes to the cluster pass a closed fence.
func TestUnfencedWrites(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		unfenced     bool
	}{
		{http.MethodPut, leases + "/cloud-controller-manager", true},
		{http.MethodPost, leases, true},
		{http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", true},
		{http.MethodPost, "/api/v1/namespaces/kube-system/serviceaccounts/service-controller/token", true},
		{http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", true},
		{http.MethodPost, "/apis/authorization.k8s.io/v1/subjectaccessreviews", true},
		{http.MethodPost, "/api/v1/namespaces/kube-system/serviceaccounts", false},
		{http.MethodDelete, "/api/v1/namespaces/kube-system/serviceaccounts/service-controller/token", false},
		{http.MethodPost, "/api/v1/namespaces/default/events", false},
		{http.MethodPatch, "/api/v1/nodes/node-1", false},
		{http.MethodPatch, "/api/v1/namespaces/default/services/web/status", false},
		{http.MethodPut, "/api/v1/namespaces/default/services/web", false},
		{http.MethodPost, "/apis/events.k8s.io/v1/namespaces/default/events", false},
		// Behind a proxy whose address has a path.
		{http.MethodPut, "/k8s/clusters/c-1" + leases + "/cloud-controller-manager", true},
		{http.MethodPost, "/k8s/clusters/c-1/api/v1/namespaces/kube-system/serviceaccounts/service-controller/token", true},
		{http.MethodPatch, "/k8s/clusters/c-1/api/v1/nodes/node-1", false},
		{http.MethodPatch, "/api/v1/namespaces/apis/services/coordination.k8s.io", false},
	} {
		req, err := http.NewRequest(tc.method, "https://cluster"+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := Unfenced(req); got != tc.unfenced {
			t.Errorf("Unfenced(%s %s) = %t, want %t", tc.method, tc.path, got, tc.unfenced)
		}
	}
}

// TestTheFenceKeepsAMarginBeforeTheLeaseRunsOut sets a renew deadline close to the lease
// duration: the fence closes MinMargin before another replica may take over, not at the renew
// deadline.
func TestTheFenceKeepsAMarginBeforeTheLeaseRunsOut(t *testing.T) {
	renewed := reading{mono: time.Minute, wall: time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC), boot: time.Hour}
	f := New("kube-system", "cloud-controller-manager", 14900*time.Millisecond, 15*time.Second)
	f.renewed = renewed
	now := renewed
	f.clock = func() reading { return now }
	if deadline, err := f.Deadline(); err != nil || !deadline.Equal(renewed.wall.Add(15*time.Second-MinMargin)) {
		t.Fatalf("Deadline() = %v, %v; want the lease duration less the margin after the renewal, %v", deadline, err, renewed.wall.Add(15*time.Second-MinMargin))
	}
	now = reading{mono: renewed.mono + 14*time.Second, wall: renewed.wall.Add(14 * time.Second), boot: renewed.boot + 14*time.Second}
	expect(t, f, "14s ago, not within 14s")
}

// TestAFenceBehindAProxyPathOpens renews the lease through an API server address with a path
// of its own, as a proxy's: the renewal still opens the fence.
func TestAFenceBehindAProxyPathOpens(t *testing.T) {
	status := http.StatusOK
	server := echo(t, &status)
	f := New("kube-system", "cloud-controller-manager", 10*time.Second, 15*time.Second)
	client := &http.Client{Transport: f.Wrap(http.DefaultTransport)}
	const json = runtime.ContentTypeJSON
	send(t, client, http.MethodPut, server.URL+"/k8s/clusters/c-1"+leases+"/cloud-controller-manager", json, leaseBody(t, "cloud-controller-manager", json))
	expect(t, f, "")
}

// TestTimingsThatLeaveNoWindowAreRefused: a window no longer than the retry period would close
// between the leader election's renewals.
func TestTimingsThatLeaveNoWindowAreRefused(t *testing.T) {
	if window, err := CheckWindow(10*time.Second, 15*time.Second, 2*time.Second); err != nil || window != 10*time.Second {
		t.Errorf("the defaults: %s, %v; want 10s", window, err)
	}
	if window, err := CheckWindow(3*time.Second, 4*time.Second, 500*time.Millisecond); err != nil || window != 3*time.Second {
		t.Errorf("the tests' timings: %s, %v; want 3s", window, err)
	}
	if _, err := CheckWindow(time.Second, 1500*time.Millisecond, 500*time.Millisecond); err == nil || !strings.Contains(err.Error(), "leave 500ms to write after each renewal") {
		t.Errorf("a lease of 1.5s with a retry period of 0.5s: %v, want a refusal", err)
	}
}
