package ironcore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// WriteFence tells until when this process may write to IronCore; a leasefence.Fence is one.
type WriteFence interface {
	// Deadline returns the instant until which writes may be sent, or why none may be now.
	Deadline() (time.Time, error)
}

// FenceWrites makes every request that would change an IronCore object carry fence's deadline:
// it fails unsent if the deadline has passed, is abandoned if still pending at it, and none of
// its bytes are put on the wire after it, even if the process was paused after the request was
// let through. Reads and watches are not affected.
func (c *Client) FenceWrites(fence WriteFence) { c.writeGate.fence.Store(&fence) }

// fencedWrites returns the transport for fenced writes: next's settings (TLS with the client
// certificate and its rotation, proxy, dialer, timeouts) speaking HTTP/1.1 only, over
// connections of its own that check deadline before each write. It returns nil if next is not
// an *http.Transport: client-go's base transport is one unless rest.Config.Transport is set.
//
// Connections of their own, speaking HTTP/1.1, because the check must refuse exactly the write
// whose bytes are due: an HTTP/1.1 connection carries one request at a time, so a refusal
// ends that write alone, whereas an HTTP/2 connection interleaves the frames of the reads and
// watches with the writes', all of which a refusal would end.
func fencedWrites(next http.RoundTripper, deadline func() (time.Time, error)) http.RoundTripper {
	base, ok := next.(*http.Transport)
	if !ok {
		return nil
	}
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

// fencedConn checks the fence's deadline before each write and, once it has passed, refuses and
// closes: a write let through just before the process was paused is not sent when it resumes.
// The request's partly written bytes that reached IronCore before are an incomplete request,
// which the API server does not carry out.
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
		return 0, fmt.Errorf("write to IronCore at %s: %w", c.RemoteAddr(), err)
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
		return 0, fmt.Errorf("set the write deadline of the connection to IronCore at %s: %w", c.RemoteAddr(), err)
	}
	return c.Conn.Write(b)
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
