package writegate

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

const loadBalancer = "/apis/networking.ironcore.dev/v1alpha1/namespaces/ns/loadbalancers/lb"

// fakeFence is open until until by a clock of its own, which a test moves to stand for a pause
// of the process; until is in the future by the real clock too, so that only the fence refuses.
type fakeFence struct {
	mu         sync.Mutex
	now, until time.Time
}

var errFenceClosed = errors.New("the fence is closed")

func newFakeFence() *fakeFence {
	now := time.Now()
	return &fakeFence{now: now, until: now.Add(time.Hour)}
}

func (f *fakeFence) Deadline() (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.now.Before(f.until) {
		return time.Time{}, errFenceClosed
	}
	return f.until, nil
}

// pass moves the fence's clock to its deadline.
func (f *fakeFence) pass() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.until
}

// received is a request as the server saw it.
type received struct {
	method, path, authorization string
	protoMajor, clientCerts     int
}

// apiServer is a TLS server speaking HTTP/2 and HTTP/1.1, as the API server does, that asks for
// a client certificate and records the requests it receives.
type apiServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
}

func newAPIServer(t *testing.T) *apiServer {
	t.Helper()
	s := &apiServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, received{
			method: r.Method, path: r.URL.Path, authorization: r.Header.Get("Authorization"),
			protoMajor: r.ProtoMajor, clientCerts: len(r.TLS.PeerCertificates),
		})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	s.EnableHTTP2 = true
	// A connection refused in its handshake is what the tests expect, not news.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, NextProtos: []string{"h2", "http/1.1"}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) received(method string) []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	var matching []received
	for _, r := range s.requests {
		if r.method == method {
			matching = append(matching, r)
		}
	}
	return matching
}

// clientCertificate makes a self-signed client certificate and its key, PEM-encoded.
func clientCertificate(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "cloud-controller-manager"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// gatedClient builds, as client-go does, an HTTP client for server from a rest.Config with a
// bearer token and a client certificate, its writes gated by the returned gate. beforeConn,
// if not nil, runs for each request between the gate and the connection the request is sent
// on (as the transport's proxy lookup, which runs there).
func gatedClient(t *testing.T, server *apiServer, exempt func(*http.Request) bool, beforeConn func(*http.Request)) (*Gate, *http.Client) {
	t.Helper()
	certPEM, keyPEM := clientCertificate(t)
	cfg := &rest.Config{
		Host:        server.URL,
		BearerToken: "token",
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}),
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		Proxy: func(req *http.Request) (*url.URL, error) {
			if beforeConn != nil {
				beforeConn(req)
			}
			return nil, nil
		},
	}
	gate := New(exempt)
	cfg.Wrap(gate.Wrap)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(httpClient.CloseIdleConnections)
	return gate, httpClient
}

func do(client *http.Client, method, path string) error {
	var body io.Reader
	if method != http.MethodGet {
		body = bytes.NewReader([]byte(`{"spec":{}}`))
	}
	req, err := http.NewRequest(method, path, body)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	_, err = io.ReadAll(resp.Body)
	return err
}

// TestAFencedWriteIsNotSentAfterTheDeadline lets a write through the gate, then passes the
// fence's deadline before the write reaches its connection, as a pause of the process there
// would: the write fails and the server never sees it, although the request's own deadline
// (by the real clock) is far. The write before, on the same connection, passes, with the
// client's credentials, over HTTP/1.1.
func TestAFencedWriteIsNotSentAfterTheDeadline(t *testing.T) {
	server := newAPIServer(t)
	fence := newFakeFence()
	var paused bool
	gate, client := gatedClient(t, server, nil, func(req *http.Request) {
		if paused && req.Method == http.MethodPatch {
			fence.pass()
		}
	})
	gate.SetFence(fence)

	if err := do(client, http.MethodPatch, server.URL+loadBalancer); err != nil {
		t.Fatalf("a write before the deadline: %v", err)
	}
	patches := server.received(http.MethodPatch)
	if len(patches) != 1 {
		t.Fatalf("the server saw %d writes, want 1", len(patches))
	}
	if got, want := patches[0], (received{method: http.MethodPatch, path: loadBalancer, authorization: "Bearer token", protoMajor: 1, clientCerts: 1}); got != want {
		t.Errorf("the server saw the write as %+v, want %+v", got, want)
	}

	paused = true
	err := do(client, http.MethodPatch, server.URL+loadBalancer)
	if err == nil || !strings.Contains(err.Error(), errFenceClosed.Error()) {
		t.Errorf("a write whose deadline passed before it was sent returned %v, want the fence's refusal", err)
	}
	t.Logf("refused: %v", err)
	if n := len(server.received(http.MethodPatch)); n != 1 {
		t.Errorf("the server saw %d writes, want only the one before the deadline", n)
	}
}

// TestAFencedWriteCarriesTheFenceDeadline checks that a write's context ends at the fence's
// deadline, so that a write still pending then is abandoned.
func TestAFencedWriteCarriesTheFenceDeadline(t *testing.T) {
	server := newAPIServer(t)
	fence := newFakeFence()
	var deadline time.Time
	var ok bool
	gate, client := gatedClient(t, server, nil, func(req *http.Request) {
		if req.Method == http.MethodPatch {
			deadline, ok = req.Context().Deadline()
		}
	})
	gate.SetFence(fence)
	if err := do(client, http.MethodPatch, server.URL+loadBalancer); err != nil {
		t.Fatal(err)
	}
	if !ok || !deadline.Equal(fence.until) {
		t.Errorf("the write's context has deadline %v (set: %t), want the fence's, %v", deadline, ok, fence.until)
	}
}

// TestReadsPassAClosedFence reads, and watches, past a closed fence, over HTTP/2 as ever, while
// a write is refused unsent.
func TestReadsPassAClosedFence(t *testing.T) {
	server := newAPIServer(t)
	fence := newFakeFence()
	fence.pass()
	gate, client := gatedClient(t, server, nil, nil)
	gate.SetFence(fence)

	for _, path := range []string{loadBalancer, loadBalancer + "?watch=true"} {
		if err := do(client, http.MethodGet, server.URL+path); err != nil {
			t.Errorf("a read of %s past a closed fence: %v", path, err)
		}
	}
	for _, read := range server.received(http.MethodGet) {
		if read.protoMajor != 2 {
			t.Errorf("a read went over HTTP/%d, want HTTP/2", read.protoMajor)
		}
	}
	if n := len(server.received(http.MethodGet)); n != 2 {
		t.Errorf("the server saw %d reads, want 2", n)
	}
	if err := do(client, http.MethodPatch, server.URL+loadBalancer); !errors.Is(err, errFenceClosed) {
		t.Errorf("a write past a closed fence returned %v, want the fence's refusal", err)
	}
	if n := len(server.received(http.MethodPatch)); n != 0 {
		t.Errorf("the server saw %d writes past a closed fence, want none", n)
	}
}

// TestUnfencedWritesTakeTheUsualWay writes without a fence: the writes go over the client's
// own transport, HTTP/2, without a deadline.
func TestUnfencedWritesTakeTheUsualWay(t *testing.T) {
	server := newAPIServer(t)
	var deadlines int
	_, client := gatedClient(t, server, nil, func(req *http.Request) {
		if _, ok := req.Context().Deadline(); ok {
			deadlines++
		}
	})
	if err := do(client, http.MethodPatch, server.URL+loadBalancer); err != nil {
		t.Fatal(err)
	}
	if err := do(client, http.MethodPatch, server.URL+loadBalancer); err != nil {
		t.Fatal(err)
	}
	patches := server.received(http.MethodPatch)
	if len(patches) != 2 {
		t.Fatalf("the server saw %d writes, want 2", len(patches))
	}
	for _, patch := range patches {
		if patch.protoMajor != 2 {
			t.Errorf("an unfenced write went over HTTP/%d, want HTTP/2", patch.protoMajor)
		}
	}
	if deadlines != 0 {
		t.Errorf("%d unfenced writes had a deadline, want none", deadlines)
	}
}

// TestExemptWritesPassAClosedFence writes past a closed fence: the exempt write reaches the
// server the usual way, the other one is refused unsent.
func TestExemptWritesPassAClosedFence(t *testing.T) {
	const lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease"
	server := newAPIServer(t)
	fence := newFakeFence()
	fence.pass()
	gate, client := gatedClient(t, server, func(req *http.Request) bool { return req.URL.Path == lease }, nil)
	gate.SetFence(fence)

	if err := do(client, http.MethodPut, server.URL+lease); err != nil {
		t.Errorf("an exempt write past a closed fence: %v", err)
	}
	if err := do(client, http.MethodPut, server.URL+loadBalancer); !errors.Is(err, errFenceClosed) {
		t.Errorf("a write past a closed fence returned %v, want the fence's refusal", err)
	}
	puts := server.received(http.MethodPut)
	if len(puts) != 1 || puts[0].path != lease {
		t.Fatalf("the server saw the writes %+v, want only the exempt one", puts)
	}
	if puts[0].protoMajor != 2 {
		t.Errorf("the exempt write went over HTTP/%d, want HTTP/2 as unfenced writes do", puts[0].protoMajor)
	}
}

// stoppedBeforeSend is a connection whose process is stopped past the fence's deadline after
// the fence's check and before each send, which then goes out when it resumes.
type stoppedBeforeSend struct {
	net.Conn
	fence *fakeFence
}

func (c stoppedBeforeSend) Write(b []byte) (int, error) {
	c.fence.pass()
	return c.Conn.Write(b)
}

// TestASendThatCrossedTheDeadlineEndsItsConnection stops the process between the fence's check
// and the send of a request's first bytes: they go out, as nothing can call them back, but the
// connection ends with them, so the rest of the request never follows and the server reads an
// incomplete request.
func TestASendThatCrossedTheDeadlineEndsItsConnection(t *testing.T) {
	client, server := net.Pipe()
	t.Cleanup(func() { _ = server.Close() })
	fence := newFakeFence()
	conn := &fencedConn{Conn: stoppedBeforeSend{Conn: client, fence: fence}, deadline: fence.Deadline}

	received := make(chan []byte)
	go func() {
		data, _ := io.ReadAll(server)
		received <- data
	}()
	head := []byte("PATCH " + loadBalancer + " HTTP/1.1\r\nHost: api\r\nContent-Length: 11\r\n\r\n")
	n, err := conn.Write(head)
	if n != len(head) || !errors.Is(err, errFenceClosed) {
		t.Errorf("the send that crossed the deadline returned %d, %v; want %d bytes and the fence's refusal", n, err, len(head))
	}
	if n, err := conn.Write([]byte(`{"spec":{}}`)); n != 0 || err == nil {
		t.Errorf("the rest of the request after the deadline returned %d, %v; want nothing sent and an error", n, err)
	}
	if got := <-received; !bytes.Equal(got, head) {
		t.Errorf("the server read %q before the connection ended, want only the request's head %q", got, head)
	}
}

// TestADryRunSendsNoWrite records every write instead of sending it, an exempt one and one
// past an open fence included, while reads reach the server.
func TestADryRunSendsNoWrite(t *testing.T) {
	const lease = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease"
	server := newAPIServer(t)
	gate, client := gatedClient(t, server, func(req *http.Request) bool { return req.URL.Path == lease }, nil)
	gate.SetFence(newFakeFence())
	errRecorded := errors.New("recorded")
	var recorded []string
	gate.RecordInstead(func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Error(err)
		}
		recorded = append(recorded, req.Method+" "+req.URL.Path+" "+string(body))
		return nil, errRecorded
	})

	for _, write := range []struct{ method, path string }{{http.MethodPut, lease}, {http.MethodPatch, loadBalancer}, {http.MethodDelete, loadBalancer}} {
		if err := do(client, write.method, server.URL+write.path); !errors.Is(err, errRecorded) {
			t.Errorf("%s %s in a dry run returned %v, want the recorder's error", write.method, write.path, err)
		}
	}
	if err := do(client, http.MethodGet, server.URL+loadBalancer); err != nil {
		t.Errorf("a read in a dry run: %v", err)
	}
	want := []string{"PUT " + lease + ` {"spec":{}}`, "PATCH " + loadBalancer + ` {"spec":{}}`, "DELETE " + loadBalancer + ` {"spec":{}}`}
	if !slices.Equal(recorded, want) {
		t.Errorf("recorded %q, want %q", recorded, want)
	}
	for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if sent := server.received(method); len(sent) != 0 {
			t.Errorf("the server saw %d %s requests in a dry run, want none", len(sent), method)
		}
	}
	if len(server.received(http.MethodGet)) != 1 {
		t.Errorf("the server saw %d reads, want 1", len(server.received(http.MethodGet)))
	}
}
