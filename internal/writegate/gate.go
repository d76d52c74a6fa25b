// Package writegate lets a client's writes through only before a fence's deadline, the last
// moment no other replica can lead. A write's connection checks the deadline before each write
// to the socket, so a write let through just before the process was paused is not sent when it
// resumes. Only the instant between that check and the system call remains: a send that crossed
// the deadline there ends its connection, so that a request it began is not completed, and an
// API server does not carry out an incomplete request. Reads and watches pass as ever.
package writegate

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Fence tells until when this process may write; a leasefence.Fence is one.
type Fence interface {
	// Deadline returns the instant until which writes may be sent, or why none may be now.
	Deadline() (time.Time, error)
}

// Gate holds the fence every write of the clients it wraps must pass; with none, all pass.
// In a dry run it sends no write at all: each goes to the recorder instead.
type Gate struct {
	fence atomic.Pointer[Fence]
	// record, if set, takes every write in place of the API server and answers it; it may
	// read over the transport it is given.
	record atomic.Pointer[Recorder]
	// exempt tells the writes that pass whatever the fence says.
	exempt func(*http.Request) bool
}

// New returns a gate without a fence; exempt, if not nil, tells the writes the fence does not
// hold (see leasefence.Unfenced).
func New(exempt func(*http.Request) bool) *Gate { return &Gate{exempt: exempt} }

// Recorder takes a write in place of the API server and answers it; next sends its reads.
type Recorder func(req *http.Request, next http.RoundTripper) (*http.Response, error)

// RecordInstead hands every write from now on, exempt or not, to record instead of sending it:
// no write leaves the process. Reads and watches pass as ever.
func (g *Gate) RecordInstead(record Recorder) { g.record.Store(&record) }

// SetFence makes every write from now on carry fence's deadline.
func (g *Gate) SetFence(fence Fence) { g.fence.Store(&fence) }

// Wrap gates the writes of a client, for rest.Config.Wrap. It must be the innermost wrapper,
// given the client's base transport: writes are fenced on the wire only over connections of an
// *http.Transport, or of the base transports of a Fenceable one.
func (g *Gate) Wrap(next http.RoundTripper) http.RoundTripper {
	return &gatedTransport{next: next, gate: g}
}

// Fenceable is a client's base transport that sends over *http.Transports of its own, such as
// one that changes credentials while it runs.
type Fenceable interface {
	// FenceWrites returns the transport sending over fence(t) for each of its *http.Transports
	// t, or over t itself where fence returns nil.
	FenceWrites(fence func(*http.Transport) http.RoundTripper) http.RoundTripper
}

// deadline is the fence's deadline for a write on the wire; with no fence, none.
func (g *Gate) deadline() (time.Time, error) {
	fence := g.fence.Load()
	if fence == nil {
		return time.Time{}, nil
	}
	return (*fence).Deadline()
}

// gatedTransport sends writes, with a fence, over connections of their own that refuse to
// write past its deadline (see fencedWrites).
type gatedTransport struct {
	next http.RoundTripper
	gate *Gate

	// writes is built from next on the first fenced write; nil if next is not an
	// *http.Transport, whose connections could be fenced.
	writes     http.RoundTripper
	writesOnce sync.Once
}

func (t *gatedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return t.next.RoundTrip(req)
	}
	if record := t.gate.record.Load(); record != nil {
		return (*record)(req, t.next)
	}
	fence := t.gate.fence.Load()
	if fence == nil || (t.gate.exempt != nil && t.gate.exempt(req)) {
		return t.next.RoundTrip(req)
	}
	deadline, err := (*fence).Deadline()
	if err != nil {
		return nil, refuse(req, err)
	}
	t.writesOnce.Do(func() {
		switch next := t.next.(type) {
		case Fenceable:
			t.writes = next.FenceWrites(func(base *http.Transport) http.RoundTripper { return fencedWrites(base, t.gate.deadline) })
		case *http.Transport:
			t.writes = fencedWrites(next, t.gate.deadline)
		}
		if t.writes == nil {
			klog.InfoS("Writes carry the leader lease's deadline but are not fenced on the wire: the client's transport is neither an *http.Transport nor writegate.Fenceable", "host", req.URL.Host, "transport", fmt.Sprintf("%T", t.next))
		}
	})
	next := t.writes
	if next == nil {
		next = t.next
	}
	// A write still waiting for a connection, or for its answer, at the deadline is abandoned.
	ctx, cancel := context.WithDeadline(req.Context(), deadline)
	return RoundTripWithin(ctx, cancel, next, req)
}

// RoundTripWithin sends req over next under ctx, and ends ctx with cancel once the answer has
// been read (its body closed) or the round trip failed: a deadline must cover reading the
// body, so it cannot be cancelled when RoundTrip returns.
func RoundTripWithin(ctx context.Context, cancel context.CancelFunc, next http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	return RoundTripAnswered(resp, cancel), nil
}

// RoundTripAnswered has cancel end a request's context once its answer, resp, has been read.
func RoundTripAnswered(resp *http.Response, cancel context.CancelFunc) *http.Response {
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp
}

// refuse fails req unsent with err; a RoundTripper must close the body even when it fails.
func refuse(req *http.Request, err error) error {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return err
}

// cancelOnClose ends a request's context once its answer has been read.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// fencedWrites returns base's settings over connections of their own that speak HTTP/1.1 and
// check deadline before each write: a refusal must end exactly the write whose bytes are due,
// whereas an HTTP/2 connection interleaves reads and watches, which a refusal would end too.
// (client-go's base transport is an *http.Transport unless rest.Config.Transport is set.)
func fencedWrites(base *http.Transport, deadline func() (time.Time, error)) http.RoundTripper {
	t := base.Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	t.HTTP2 = nil
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	if t.TLSClientConfig != nil {
		// The clone keeps GetClientCertificate (exec plugins, reloaded files). Offering h2
		// would let the server choose it, which this transport cannot speak.
		t.TLSClientConfig.NextProtos = slices.DeleteFunc(slices.Clone(t.TLSClientConfig.NextProtos), func(proto string) bool { return proto == "h2" })
	}
	dial := t.DialContext
	//nolint:staticcheck // SA1019: a transport that dials with the deprecated Dial keeps doing so.
	if legacy := t.Dial; dial == nil && legacy != nil {
		dial = func(_ context.Context, network, address string) (net.Conn, error) { return legacy(network, address) }
	}
	if dial == nil {
		// What net/http dials with when neither is set.
		dial = (&net.Dialer{}).DialContext
	}
	t.DialContext = fenceDial(dial, deadline)
	dialTLS := t.DialTLSContext
	//nolint:staticcheck // SA1019: as for Dial.
	if legacy := t.DialTLS; dialTLS == nil && legacy != nil {
		dialTLS = func(_ context.Context, network, address string) (net.Conn, error) { return legacy(network, address) }
	}
	if dialTLS != nil {
		t.DialTLSContext = fenceDial(dialTLS, deadline)
	}
	return t
}

type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

func fenceDial(dial dialFunc, deadline func() (time.Time, error)) dialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &fencedConn{Conn: conn, deadline: deadline}, nil
	}
}

// fencedConn refuses and closes once the deadline has passed. Bytes of the request that reached
// the API server before form an incomplete request, which it does not carry out.
type fencedConn struct {
	net.Conn
	deadline func() (time.Time, error)

	mu sync.Mutex
	// own is the write deadline the connection's user set (TLS sets one around its closing
	// alert, and a past one after it), kept where it is sooner than the fence's.
	own time.Time
}

func (c *fencedConn) Write(b []byte) (int, error) {
	deadline, err := c.deadline()
	if err != nil {
		_ = c.Close()
		return 0, fmt.Errorf("write to %s: %w", c.RemoteAddr(), err)
	}
	c.mu.Lock()
	if !c.own.IsZero() && (deadline.IsZero() || c.own.Before(deadline)) {
		deadline = c.own
	}
	// A write blocked on a full socket then fails at the deadline rather than finishing after.
	err = c.Conn.SetWriteDeadline(deadline)
	c.mu.Unlock()
	if err != nil {
		_ = c.Close()
		return 0, fmt.Errorf("set the write deadline of the connection to %s: %w", c.RemoteAddr(), err)
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		return n, err
	}
	// A process stopped between the check and the send sends when it resumes. Nothing calls
	// the bytes back, but the connection ends here, so that the rest of the request does not
	// follow them: an API server does not carry out a request it did not receive whole.
	if _, late := c.deadline(); late != nil {
		klog.InfoS("Bytes of a write went to the wire as the fence closed: the process was stopped between the check and the send; ending the connection", "remote", c.RemoteAddr(), "bytes", n, "reason", late.Error())
		_ = c.Close()
		return n, fmt.Errorf("write to %s: sent as the fence closed: %w", c.RemoteAddr(), late)
	}
	return n, nil
}

func (c *fencedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.own = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *fencedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.own = t
	return c.Conn.SetDeadline(t)
}
