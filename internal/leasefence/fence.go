// Package leasefence stops a replica that has lost its leader lease, without knowing it yet,
// from writing to IronCore. A leader that is paused (a frozen VM, a stopped process, a long
// pause of its runtime) past its lease resumes with its controllers mid-work: client-go's
// leader election notices the loss only when its next renewal fails, up to the renew deadline
// later, and until then every worker goes on writing while another replica already leads.
//
// The fence watches this process's own writes of the lease: every acquisition and renewal the
// leader election makes is a successful write of the lease by this process. A write to IronCore
// passes only if the last one was sent less than the renew deadline ago, by this process's
// clock. Another replica takes over only a whole lease duration, which is longer, after the
// last renewal it saw. No identity has to be guessed: a renewal this process made is its own.
package leasefence

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Fence follows this replica's renewals of its leader lease.
type Fence struct {
	namespace, name string
	renewDeadline   time.Duration
	now             func() time.Time

	mu sync.Mutex
	// renewed is when the last write of the lease that succeeded was sent; zero until the
	// first.
	renewed time.Time
	// refusing is whether the last check refused, so that the change is logged once.
	refusing bool
}

// New returns a fence for the lease namespace/name, renewed by this replica's leader election
// with renewDeadline. Wrap the leader election's client with Wrap.
func New(namespace, name string, renewDeadline time.Duration) *Fence {
	return &Fence{namespace: namespace, name: name, renewDeadline: renewDeadline, now: time.Now}
}

// Wrap observes the requests of a client, for rest.Config.Wrap: given the configuration the
// leader election's client is built from, the fence sees each of its writes of the lease.
func (f *Fence) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if !f.writesLease(req) {
			return next.RoundTrip(req)
		}
		sent := f.now()
		resp, err := next.RoundTrip(req)
		if err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
			f.mu.Lock()
			if sent.After(f.renewed) {
				f.renewed = sent
			}
			f.mu.Unlock()
		}
		return resp, err
	})
}

// writesLease tells a create or update of the lease: the leader election creates it (POST to
// the namespace's leases) or updates it (PUT to its name).
func (f *Fence) writesLease(req *http.Request) bool {
	collection := "/apis/coordination.k8s.io/v1/namespaces/" + f.namespace + "/leases"
	switch req.Method {
	case http.MethodPost:
		return req.URL.Path == collection
	case http.MethodPut, http.MethodPatch:
		return req.URL.Path == collection+"/"+f.name
	}
	return false
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Check returns nil if this replica may write now, or why not.
func (f *Fence) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.check()
	if (err != nil) != f.refusing {
		f.refusing = err != nil
		if err != nil {
			klog.InfoS("Stopped writing to IronCore", "reason", err.Error())
		} else {
			klog.InfoS("Writing to IronCore: this replica renewed the leader lease", "lease", klog.KRef(f.namespace, f.name), "renewDeadline", f.renewDeadline)
		}
	}
	return err
}

func (f *Fence) check() error {
	if f.renewed.IsZero() {
		return fmt.Errorf("not writing to IronCore: this replica has not written the leader lease %s/%s", f.namespace, f.name)
	}
	if age := f.now().Sub(f.renewed); age >= f.renewDeadline {
		return fmt.Errorf("not writing to IronCore: this replica last renewed the leader lease %s/%s %s ago, not within the renew deadline %s; another replica may lead",
			f.namespace, f.name, age.Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}
