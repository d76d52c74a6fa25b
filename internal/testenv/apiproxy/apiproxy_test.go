package apiproxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

const patchPath = "/apis/networking.ironcore.dev/v1alpha1/namespaces/ns/networkinterfaces/nic"

// TestAWriteCutOffMidRequestIsMarkedCut sends a write whole and one whose body stops short of
// its declared length before the connection ends, as a client's fence does: the proxy logs both,
// and marks only the second cut, which its API server never received whole; the fields of the
// whole one's body are named.
func TestAWriteCutOffMidRequestIsMarkedCut(t *testing.T) {
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(upstream.Close)
	proxy, err := Start(&rest.Config{Host: upstream.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(proxy.caPEM)
	address := strings.TrimPrefix(proxy.URL(), "https://")

	send := func(body string, length int) {
		t.Helper()
		conn, err := tls.Dial("tcp", address, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		request := fmt.Sprintf("PATCH %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/merge-patch+json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			patchPath, address, length, body)
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		if len(body) < length {
			// The rest never comes: the client's connection ends here.
			_ = conn.CloseWrite()
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		_, _ = io.ReadAll(conn) // until the proxy has answered and closed
	}
	send(`{"metadata":{"labels":{"a":"b"}}}`, len(`{"metadata":{"labels":{"a":"b"}}}`))
	send(`{"metadata":`, len(`{"metadata":{"labels":{"a":"b"}}}`))

	writes := proxy.Writes()
	if len(writes) != 2 {
		t.Fatalf("the proxy logged %d writes, want 2: %+v", len(writes), writes)
	}
	if whole := writes[0]; whole.Cut || whole.Status != http.StatusOK || !slices.Equal(whole.Fields, []string{"metadata"}) {
		t.Errorf("the whole write was logged as %+v, want it answered 200, not cut, setting metadata", whole)
	}
	if cut := writes[1]; !cut.Cut || cut.Fields != nil {
		t.Errorf("the write cut off mid-request was logged as %+v, want it cut, with no fields", cut)
	}
	t.Logf("whole: %+v; cut: %+v", writes[0], writes[1])
}
