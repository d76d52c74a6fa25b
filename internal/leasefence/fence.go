// Package leasefence stops a replica that has lost its leader lease, without knowing it yet,
// from writing to IronCore. A leader that is paused (a frozen VM, a stopped process, a long
// pause of its runtime) past its lease resumes with its controllers mid-work: client-go's
// leader election notices the loss only when its next renewal fails, up to the renew deadline
// later, and until then every worker goes on writing while another replica already leads.
//
// The fence watches this process's own successful writes of the lease, so no identity has to
// be guessed. This replica may write until the last such write's sending plus the renew
// deadline; another replica takes over only a whole lease duration after the last renewal it
// saw, and the difference is the margin for clocks and for a write's transit.
//
// The time since the renewal is the longest of what three clocks say: the monotonic clock, which
// on Linux stops while the machine is suspended, the boot-time clock, which counts a suspension,
// and the wall clock, which a virtual machine's host or NTP moves forward after a pause the
// other two did not see.
package leasefence

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
)

// maxLeaseBytes bounds how much of a created lease's response is read to find its name; a
// Lease is a few hundred bytes.
const maxLeaseBytes = 1 << 20

// Fence follows this replica's renewals of its leader lease.
type Fence struct {
	namespace, name string
	// renewDeadline is how long after a renewal this replica may write.
	renewDeadline time.Duration
	clock         func() reading
	// decoder reads the lease a create returns, in JSON or protobuf as the client asked.
	decoder runtime.Decoder

	mu sync.Mutex
	// renewed is when the last write of the lease that succeeded was sent; zero until the
	// first.
	renewed reading
	// refusing is whether the last check refused, so that the change is logged once.
	refusing bool
}

// MinMargin is the least time the fence leaves between its deadline and the earliest moment
// another replica can take the lease over, for a write already on its way to arrive.
const MinMargin = time.Second

// New returns a fence for the lease namespace/name, renewed by this replica's leader election
// with renewDeadline, which other replicas take over leaseDuration after its last renewal.
// Writes may go until the renew deadline after a renewal, and at the latest MinMargin before
// the lease duration is over. Wrap the leader election's client with Wrap.
func New(namespace, name string, renewDeadline, leaseDuration time.Duration) *Fence {
	return &Fence{
		namespace: namespace, name: name, renewDeadline: min(renewDeadline, leaseDuration-MinMargin), clock: newClock(),
		decoder: clientgoscheme.Codecs.UniversalDeserializer(),
	}
}

// Wrap observes the requests of a client, for rest.Config.Wrap: given the configuration the
// leader election's client is built from, the fence sees each of its writes of the lease.
func (f *Fence) Wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		create, ok := f.writesLease(req)
		if !ok {
			return next.RoundTrip(req)
		}
		sent := f.clock()
		resp, err := next.RoundTrip(req)
		if err != nil || resp.StatusCode < 200 || resp.StatusCode >= 300 {
			return resp, err
		}
		// A create names the lease in its body, not its path: another lease of the namespace
		// (the leader migration's, say) is no renewal of this one.
		if create && !f.createdLease(resp) {
			return resp, nil
		}
		f.mu.Lock()
		if f.renewed.wall.IsZero() || sent.mono > f.renewed.mono {
			f.renewed = sent
		}
		f.mu.Unlock()
		return resp, nil
	})
}

// writesLease tells a create of a lease of the namespace, which may be this one, or an update
// of this one. Paths are matched by their end, as the API server's address may have a path of
// its own (a proxy's).
func (f *Fence) writesLease(req *http.Request) (create, ok bool) {
	collection := "/apis/coordination.k8s.io/v1/namespaces/" + f.namespace + "/leases"
	switch req.Method {
	case http.MethodPost:
		return true, strings.HasSuffix(req.URL.Path, collection)
	case http.MethodPut, http.MethodPatch:
		return false, strings.HasSuffix(req.URL.Path, collection+"/"+f.name)
	}
	return false, false
}

// createdLease tells whether a successful create's response is this fence's lease. It reads
// the body and puts it back for the caller.
func (f *Fence) createdLease(resp *http.Response) bool {
	read, err := io.ReadAll(io.LimitReader(resp.Body, maxLeaseBytes))
	// The caller reads what was read, then the rest, and closes the original body.
	resp.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(read), resp.Body), Closer: resp.Body}
	if err != nil {
		klog.InfoS("Not counting a lease create as a renewal: cannot read its response", "lease", klog.KRef(f.namespace, f.name), "err", err)
		return false
	}
	obj, err := runtime.Decode(f.decoder, read)
	if err != nil {
		klog.InfoS("Not counting a lease create as a renewal: cannot decode its response", "lease", klog.KRef(f.namespace, f.name), "err", err)
		return false
	}
	object, err := meta.Accessor(obj)
	if err != nil {
		klog.InfoS("Not counting a lease create as a renewal: its response has no metadata", "lease", klog.KRef(f.namespace, f.name), "err", err)
		return false
	}
	return object.GetName() == f.name
}

type readCloser struct {
	io.Reader
	io.Closer
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Deadline returns the instant until which this replica may write, the last renewal it sent
// plus the renew deadline, or why it may not write now.
func (f *Fence) Deadline() (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	deadline, err := f.deadline()
	if (err != nil) != f.refusing {
		f.refusing = err != nil
		if err != nil {
			klog.InfoS("Stopped writing to IronCore and to the cluster", "reason", err.Error())
		} else {
			klog.InfoS("Writing to IronCore and to the cluster: this replica renewed the leader lease", "lease", klog.KRef(f.namespace, f.name), "writesFor", f.renewDeadline)
		}
	}
	return deadline, err
}

func (f *Fence) deadline() (time.Time, error) {
	if f.renewed.wall.IsZero() {
		return time.Time{}, fmt.Errorf("not writing: this replica has not written the leader lease %s/%s", f.namespace, f.name)
	}
	now := f.clock()
	elapsed := now.since(f.renewed)
	if elapsed >= f.renewDeadline {
		return time.Time{}, fmt.Errorf("not writing: this replica last renewed the leader lease %s/%s %s ago, not within %s; another replica may lead",
			f.namespace, f.name, elapsed.Round(time.Millisecond), f.renewDeadline)
	}
	return now.wall.Add(f.renewDeadline - elapsed), nil
}

// Unfenced tells the writes that pass the fence whatever it says: writes of leases, so that the
// fence can open at all, and creates that change nothing (service account tokens, reviews of
// tokens and permissions). Paths are matched after any path of the API server's address.
func Unfenced(req *http.Request) bool {
	segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	for i := range segments {
		rest := segments[i:]
		switch {
		case len(rest) >= 2 && rest[0] == "apis" && rest[1] == "coordination.k8s.io":
			return slices.Contains(rest, "leases")
		case len(rest) >= 2 && rest[0] == "apis" && (rest[1] == "authentication.k8s.io" || rest[1] == "authorization.k8s.io"):
			return req.Method == http.MethodPost
		case len(rest) == 7 && rest[0] == "api" && rest[1] == "v1" && rest[2] == "namespaces" && rest[4] == "serviceaccounts" && rest[6] == "token":
			// POST /api/v1/namespaces/<namespace>/serviceaccounts/<name>/token
			return req.Method == http.MethodPost
		}
	}
	return false
}

// CheckWindow returns how long after a renewal this replica may write, for New's arguments, or
// why the leader election's timings leave too short a window: the leader election renews every
// retryPeriod, and a window no longer than that would close between renewals.
func CheckWindow(renewDeadline, leaseDuration, retryPeriod time.Duration) (time.Duration, error) {
	window := min(renewDeadline, leaseDuration-MinMargin)
	if window <= retryPeriod {
		return 0, fmt.Errorf("--leader-elect-lease-duration %s and --leader-elect-renew-deadline %s leave %s to write after each renewal "+
			"(the renew deadline, and at most the lease duration less %s), not more than --leader-elect-retry-period %s: "+
			"writes would stop between renewals; lengthen the lease duration", leaseDuration, renewDeadline, window, MinMargin, retryPeriod)
	}
	return window, nil
}
