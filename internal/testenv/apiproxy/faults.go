package apiproxy

import (
	"fmt"
	mathrand "math/rand/v2"
	"net/http"
	"time"
)

// FaultKind is a way the proxy can fail a request.
type FaultKind string

// The faults the proxy injects.
const (
	// ServerError answers 500 Internal Server Error.
	ServerError FaultKind = "server-error"
	// Hang holds the request until the client gives up.
	Hang FaultKind = "hang"
	// Reset aborts the response: the client sees its stream or connection reset.
	Reset FaultKind = "reset"
	// Slow forwards the request after a delay.
	Slow FaultKind = "slow"
	// Conflict answers 409 Conflict, as to a write whose resourceVersion is stale.
	Conflict FaultKind = "conflict"
	// Invalid answers 422 Unprocessable Entity, as to a write that failed validation or a
	// JSON patch test.
	Invalid FaultKind = "invalid"
)

// Fault fails a share of the requests it matches.
type Fault struct {
	Kind FaultKind
	// Rate is the share of the matching requests that fail, from 0 to 1.
	Rate float64
	// Match selects the requests; nil selects all.
	Match func(Request) bool
	// Delay is how long Slow holds a request before forwarding it.
	Delay time.Duration
}

// SetFaults replaces the faults the proxy injects, while it forwards; none stops injecting.
// The first fault that matches a request and draws it decides. seed makes the draws
// repeatable.
func (p *Proxy) SetFaults(seed uint64, faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = faults
	p.random = mathrand.New(mathrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // test fault draws, not secrets
}

// Injected returns how many requests each kind of fault has failed since the start or the
// last Reset.
func (p *Proxy) Injected() map[FaultKind]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	injected := make(map[FaultKind]int, len(p.injected))
	for kind, n := range p.injected {
		injected[kind] = n
	}
	return injected
}

// drawFault picks the fault for a request, if any, and counts it. Call it with p.mu held.
func (p *Proxy) drawFault(req Request) *Fault {
	for i := range p.faults {
		fault := &p.faults[i]
		if fault.Match != nil && !fault.Match(req) {
			continue
		}
		if p.random.Float64() < fault.Rate {
			p.injected[fault.Kind]++
			return fault
		}
	}
	return nil
}

// inject fails the request as the fault says, and reports whether the request is done; a
// Slow request is forwarded after its delay.
func inject(fault *Fault, w http.ResponseWriter, r *http.Request) bool {
	switch fault.Kind {
	case ServerError:
		writeStatus(w, http.StatusInternalServerError, "InternalError")
	case Conflict:
		writeStatus(w, http.StatusConflict, "Conflict")
	case Invalid:
		writeStatus(w, http.StatusUnprocessableEntity, "Invalid")
	case Hang:
		<-r.Context().Done()
	case Reset:
		// The server resets the stream (HTTP/2) or closes the connection (HTTP/1.1).
		panic(http.ErrAbortHandler)
	case Slow:
		select {
		case <-time.After(fault.Delay):
			return false
		case <-r.Context().Done():
		}
	default:
		writeStatus(w, http.StatusInternalServerError, "InternalError")
	}
	return true
}

// writeStatus answers with a Kubernetes Status of the code and reason.
func writeStatus(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected failure","reason":%q,"code":%d}`, reason, code)
}
