// Package apiproxy puts a proxy between a client under test and a Kubernetes-style API server.
// The proxy forwards every request with one fixed identity, counts requests by verb and
// resource (so any client's API usage can be measured from outside it), and on demand answers
// with errors or stops listening altogether, or injects faults into a share of the requests
// (errors, hangs, resets, delays, conflicts), to test how a client rides out a failing API.
package apiproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// Mode is what the proxy does with requests.
type Mode int

const (
	// Forward passes requests to the API server.
	Forward Mode = iota
	// Fail answers every request with 503 Service Unavailable.
	Fail
	// Down stops listening and drops open connections: the API is unreachable.
	Down
)

// Request identifies a kind of request for counting.
type Request struct {
	Verb     string
	Resource string
}

// Write is one mutating request the proxy forwarded: when it arrived (when the client sent
// it), what it wrote and how the API server answered (0 while it has not).
type Write struct {
	At       time.Time
	Verb     string
	Resource string
	Name     string
	Status   int
	// Bytes is the size of the request's body, known once the API server has answered.
	Bytes int64
	// Took is how long the API server took to answer (0 while it has not).
	Took time.Duration
	// Cut is whether the request's body ended before its end, as when the client stops sending
	// in the middle of a request: the API server did not receive it whole, so did not carry it
	// out.
	Cut bool
	// Fields are the top-level fields a JSON body of at most maxFieldsBody bytes sets, sorted
	// (a status patch sets "status"; one that adds a finalizer, "metadata" only); nil for any
	// other body.
	Fields []string
}

// maxFieldsBody is the largest body whose fields a Write names: the small writes that tell one
// kind of patch from another, not the routings of a thousand Nodes.
const maxFieldsBody = 16 << 10

// mutating are the verbs of requests that change objects.
var mutating = sets.NewString("create", "update", "patch", "delete", "deletecollection")

// Count is how many requests of one kind arrived, and how many of them the API server refused
// (status 400 or more: conflicts, not found, invalid).
type Count struct {
	Request
	N, Refused int
}

// Proxy is a running proxy.
type Proxy struct {
	upstream *url.URL
	handler  http.Handler
	tlsCert  tls.Certificate
	caPEM    []byte
	addr     string
	info     *request.RequestInfoFactory

	mu      sync.Mutex
	mode    Mode
	failing func(Request) bool
	// delaying accepts the requests held for delay before they are forwarded.
	delaying func(Request) bool
	delay    time.Duration
	server   *http.Server
	counts   map[Request]int
	refused  map[Request]int
	writes   []Write
	// generation counts Resets, so that a write answered after one is not recorded in the
	// new log.
	generation int
	// faults are injected while the mode forwards; random draws them, and injected counts
	// the requests they failed.
	faults   []Fault
	random   *mathrand.Rand
	injected map[FaultKind]int
	// onWrite, if set, sees each write before it is forwarded; onWriteHook numbers it, out of
	// hooks set so far.
	onWrite            func(Write)
	onWriteHook, hooks int
	// held are the resources whose watch events are held back; released is closed when the
	// current hold ends.
	held     sets.Set[string]
	released chan struct{}
}

// Start listens on a loopback port and forwards to the API server of upstream, authenticating
// as upstream's identity.
func Start(upstream *rest.Config) (*Proxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("parse upstream host %q: %w", upstream.Host, err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("build upstream transport: %w", err)
	}
	cert, caPEM, err := selfSignedCert()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		upstream: target,
		tlsCert:  cert,
		caPEM:    caPEM,
		counts:   map[Request]int{},
		refused:  map[Request]int{},
		injected: map[FaultKind]int{},
		info: &request.RequestInfoFactory{
			APIPrefixes:          sets.NewString("api", "apis"),
			GrouplessAPIPrefixes: sets.NewString("api"),
		},
	}
	p.handler = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Del("Authorization")
		},
		Transport:     transport,
		FlushInterval: -1, // stream watch events as they come
		// A client hanging up mid-request is normal here (watches end, outages are injected).
		ErrorLog: log.New(io.Discard, "", 0),
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = listener.Addr().String()
	p.serve(listener)
	return p, nil
}

// URL is the proxy's address.
func (p *Proxy) URL() string { return "https://" + p.addr }

// ClientConfig is how to reach the API server through the proxy: no credentials of its own.
func (p *Proxy) ClientConfig() *rest.Config {
	return &rest.Config{Host: p.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM}}
}

// SetMode switches what the proxy does with requests from now on.
func (p *Proxy) SetMode(mode Mode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	previous := p.mode
	p.mode = mode
	switch {
	case mode == Down && previous != Down:
		// Close drops every open connection, including the clients' watches.
		return p.server.Close()
	case mode != Down && previous == Down:
		listener, err := net.Listen("tcp", p.addr)
		if err != nil {
			return fmt.Errorf("listen on %s again: %w", p.addr, err)
		}
		p.serveLocked(listener)
	}
	return nil
}

// FailWhere answers 503 Service Unavailable to the requests match accepts, while the mode
// forwards the others; nil stops it.
func (p *Proxy) FailWhere(match func(Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing = match
}

// DelayWhere holds each request match accepts for d before forwarding it, as an API server
// slow to answer would; nil stops it.
func (p *Proxy) DelayWhere(match func(Request) bool, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delaying, p.delay = match, d
}

// Counts returns the requests seen since the start or the last Reset, most frequent first.
func (p *Proxy) Counts() []Count {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := make([]Count, 0, len(p.counts))
	for req, n := range p.counts {
		counts = append(counts, Count{Request: req, N: n, Refused: p.refused[req]})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].N != counts[j].N {
			return counts[i].N > counts[j].N
		}
		if counts[i].Verb != counts[j].Verb {
			return counts[i].Verb < counts[j].Verb
		}
		return counts[i].Resource < counts[j].Resource
	})
	return counts
}

// Writes returns the mutating requests the proxy forwarded to the API server since the start
// or the last Reset, in the order they were forwarded; requests the proxy failed itself are
// not among them.
func (p *Proxy) Writes() []Write {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Write(nil), p.writes...)
}

// OnWrite calls see with each write that arrives from now on, before the write is forwarded
// (which waits for see to return), until see returns true or cancel is called. A test pauses
// the client there: in the middle of a write.
func (p *Proxy) OnWrite(see func(Write) bool) (cancel func()) {
	var (
		mu   sync.Mutex
		done bool
	)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hooks++
	hook := p.hooks
	// One write at a time: the others wait while see pauses the client.
	p.onWrite = func(write Write) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			done = see(write)
		}
	}
	p.onWriteHook = hook
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.onWriteHook == hook { // not a later caller's
			p.onWrite = nil
		}
	}
}

// Reset clears the counts, the writes, and the counts of injected faults.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writes = nil
	p.generation++
	p.counts = map[Request]int{}
	p.refused = map[Request]int{}
	p.injected = map[FaultKind]int{}
}

// Close stops the proxy.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = Down
	return p.server.Close()
}

func (p *Proxy) serve(listener net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serveLocked(listener)
}

func (p *Proxy) serveLocked(listener net.Listener) {
	server := &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{p.tlsCert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	p.server = server
	go func() {
		if err := server.ServeTLS(listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("apiproxy: %v\n", err)
		}
	}()
}

func (p *Proxy) serveHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	req := Request{Verb: r.Method, Resource: r.URL.Path}
	var write *Write
	if info, err := p.info.NewRequestInfo(r); err == nil && info.IsResourceRequest {
		req = Request{Verb: info.Verb, Resource: resourceName(info)}
		if mutating.Has(info.Verb) {
			write = &Write{At: arrived, Verb: info.Verb, Resource: req.Resource, Name: info.Name}
		}
	}
	p.mu.Lock()
	p.counts[req]++
	mode := p.mode
	failing := p.failing
	delaying, delay := p.delaying, p.delay
	var fault *Fault
	if mode == Forward {
		fault = p.drawFault(req)
	}
	p.mu.Unlock()
	if mode != Forward || (failing != nil && failing(req)) {
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable")
		return
	}
	if fault != nil && inject(fault, w, r) {
		return
	}
	if delaying != nil && delaying(req) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	// A write is logged when it is forwarded, so that a check finds it even while the API
	// server has not answered yet.
	index, generation := -1, 0
	var body *countingBody
	if write != nil && r.Body != nil {
		body = &countingBody{ReadCloser: r.Body}
		r.Body = body
	}
	if write != nil {
		p.mu.Lock()
		index, generation = len(p.writes), p.generation
		p.writes = append(p.writes, *write)
		onWrite := p.onWrite
		p.mu.Unlock()
		if onWrite != nil {
			onWrite(*write)
		}
	}
	recorder := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	if info, err := p.info.NewRequestInfo(r); err == nil && info.IsResourceRequest && info.Verb == "watch" {
		recorder.ResponseWriter = &heldWriter{ResponseWriter: w, proxy: p, resource: req.Resource}
	}
	p.handler.ServeHTTP(recorder, r)
	p.mu.Lock()
	defer p.mu.Unlock()
	if recorder.status >= http.StatusBadRequest {
		p.refused[req]++
	}
	if index >= 0 && generation == p.generation {
		p.writes[index].Status = recorder.status
		p.writes[index].Took = time.Since(arrived)
		if body != nil {
			p.writes[index].Bytes = body.n.Load()
			p.writes[index].Cut = body.cut(r.ContentLength)
			if !p.writes[index].Cut {
				p.writes[index].Fields = body.fields()
			}
		}
	}
}

// countingBody counts the bytes read from a request's body, whether reading it failed, and
// keeps the first maxFieldsBody bytes. The transport may still read it while the answer is being
// handled, hence the atomics and the lock.
type countingBody struct {
	io.ReadCloser
	n      atomic.Int64
	failed atomic.Bool

	mu   sync.Mutex
	head []byte
}

func (b *countingBody) Read(data []byte) (int, error) {
	n, err := b.ReadCloser.Read(data)
	b.n.Add(int64(n))
	if err != nil && !errors.Is(err, io.EOF) {
		b.failed.Store(true)
	}
	b.mu.Lock()
	if keep := min(n, maxFieldsBody+1-len(b.head)); keep > 0 {
		b.head = append(b.head, data[:keep]...)
	}
	b.mu.Unlock()
	return n, err
}

// fields returns the top-level fields of a JSON object body of at most maxFieldsBody bytes.
func (b *countingBody) fields() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.head) > maxFieldsBody {
		return nil
	}
	var object map[string]json.RawMessage
	if err := json.Unmarshal(b.head, &object); err != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(object))
}

// cut tells whether the body ended before its end: reading it failed, or fewer bytes came than
// the request declared.
func (b *countingBody) cut(length int64) bool {
	return b.failed.Load() || (length > 0 && b.n.Load() < length)
}

// HoldWatches holds back the events of every watch of the resource (as the proxy counts it, for
// example "networkinterfaces.networking.ironcore.dev"), open or opened later, until release is
// called: the clients' caches fall behind the API server, as they do when a watch lags.
// Requests other than watches pass.
func (p *Proxy) HoldWatches(resource string) (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = sets.New[string]()
	}
	if p.released == nil {
		p.released = make(chan struct{})
	}
	p.held.Insert(resource)
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.held.Delete(resource)
			close(p.released)
			p.released = make(chan struct{})
		})
	}
}

// waitWhileHeld blocks while the resource's watch events are held back.
func (p *Proxy) waitWhileHeld(resource string) {
	for {
		p.mu.Lock()
		held, released := p.held.Has(resource), p.released
		p.mu.Unlock()
		if !held {
			return
		}
		<-released
	}
}

// heldWriter writes a watch's events once they are no longer held back.
type heldWriter struct {
	http.ResponseWriter
	proxy    *Proxy
	resource string
}

func (w *heldWriter) Write(data []byte) (int, error) {
	w.proxy.waitWhileHeld(w.resource)
	return w.ResponseWriter.Write(data)
}

func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusRecorder remembers the status code of a response. It keeps http.Flusher reachable
// (through Unwrap, for http.ResponseController), which watches need.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func resourceName(info *request.RequestInfo) string {
	name := info.Resource
	if info.APIGroup != "" {
		name += "." + info.APIGroup
	}
	if info.Subresource != "" {
		name += "/" + info.Subresource
	}
	return name
}

func selfSignedCert() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "apiproxy"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	return cert, certPEM, err
}
