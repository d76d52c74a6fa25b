package leasefence

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
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
	f := New("kube-system", "cloud-controller-manager", 10*time.Second)
	f.now = func() time.Time { return now }
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
	now = now.Add(9 * time.Second)
	if deadline, err := f.Deadline(); err != nil || !deadline.Equal(acquired.Add(10*time.Second)) {
		t.Fatalf("Deadline() = %v, %v; want the acquisition plus the renew deadline, %v", deadline, err, acquired.Add(10*time.Second))
	}
	now = now.Add(time.Second)
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
	now = now.Add(5 * time.Second)
	send(t, client, http.MethodPut, server.URL+leases+"/cloud-controller-manager", json, own)
	now = now.Add(5 * time.Second)
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
			f := New("kube-system", "cloud-controller-manager", 10*time.Second)
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
