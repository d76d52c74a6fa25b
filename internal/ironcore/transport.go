package ironcore

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/writegate"
)

// instrumentedTransport counts and times every request to the IronCore API, by the verb and
// resource the API server will see (the same names its audit log and RBAC use).
type instrumentedTransport struct {
	next http.RoundTripper
	info *request.RequestInfoFactory
}

func instrument(next http.RoundTripper) http.RoundTripper {
	metrics.Register()
	return &instrumentedTransport{next: next, info: newRequestInfoFactory()}
}

// newRequestInfoFactory names requests as the API server does.
func newRequestInfoFactory() *request.RequestInfoFactory {
	return &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
}

func (t *instrumentedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, resource := t.describe(req)
	started := time.Now()
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	metrics.IronCoreRequests.WithLabelValues(verb, resource, code).Inc()
	if verb != "watch" {
		metrics.IronCoreRequestDuration.WithLabelValues(verb, resource).Observe(time.Since(started).Seconds())
	}
	return resp, err
}

// describe names a request as RBAC does (get, list, watch, create, patch, ...) with its
// resource qualified by API group; discovery requests are named by their path's first segment.
func (t *instrumentedTransport) describe(req *http.Request) (verb, resource string) {
	info, err := t.info.NewRequestInfo(req)
	if err != nil || !info.IsResourceRequest {
		return "discovery", "-"
	}
	resource = info.Resource
	if info.APIGroup != "" {
		resource += "." + info.APIGroup
	}
	if info.Subresource != "" {
		resource += "/" + info.Subresource
	}
	return info.Verb, resource
}

// RequestTimeout bounds each request to the IronCore API that is neither a watch nor a list,
// unless the caller's context ends sooner, and RequestTimeoutPerMiB adds to it for each MiB the
// request sends. A hung request holds the controller key it serves, so a routing whose Node
// just went away keeps it until the request is given up: the bound is short next to the
// slowest request measured (a 300 KB routing written in 3.2 s while 2,000 Nodes joined), and a
// large routing gets more time than a small one. A list reads a whole collection (an
// informer's, where the API server cannot stream it as a watch) and serves no one key: it
// keeps ListTimeout.
const (
	RequestTimeout       = 10 * time.Second
	RequestTimeoutPerMiB = 10 * time.Second
	ListTimeout          = 30 * time.Second
)

// WatchAnswerTimeout bounds how long a watch waits for the API server to answer it. Answered,
// a watch stays open for minutes; never answered (a connection or a proxy that hangs), it
// would hold its informer for good: not synced, and never retried. With the WatchList
// feature, an informer's first list is such a watch, and an API server's priority and
// fairness may hold a watch in its queue a while before it answers.
const WatchAnswerTimeout = 30 * time.Second

// boundedTransport gives every request that is not a watch a deadline (requestTimeout), unless
// its context has one: an API server (or a proxy before it) that accepts a request and never
// answers would otherwise hold the caller, a controller's worker say, for good, since the
// upstream controllers call the provider without deadlines. A watch gets WatchAnswerTimeout to
// be answered.
type boundedTransport struct {
	next http.RoundTripper
	info *request.RequestInfoFactory
}

func bound(next http.RoundTripper) http.RoundTripper {
	return &boundedTransport{next: next, info: newRequestInfoFactory()}
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, ok := req.Context().Deadline(); ok {
		return t.next.RoundTrip(req)
	}
	if isWatch(req) {
		return answeredWithin(WatchAnswerTimeout, t.next, req)
	}
	ctx, cancel := context.WithTimeout(req.Context(), t.timeoutOf(req))
	return writegate.RoundTripWithin(ctx, cancel, t.next, req)
}

// timeoutOf is how long a request that is not a watch may take: ListTimeout for a list, else
// RequestTimeout and RequestTimeoutPerMiB for each MiB of its body.
func (t *boundedTransport) timeoutOf(req *http.Request) time.Duration {
	if info, err := t.info.NewRequestInfo(req); err == nil && info.IsResourceRequest && info.Verb == "list" {
		return ListTimeout
	}
	timeout := RequestTimeout
	if req.ContentLength > 0 {
		timeout += time.Duration(float64(RequestTimeoutPerMiB) * float64(req.ContentLength) / (1 << 20))
	}
	return timeout
}

// answeredWithin sends req and gives up if no answer comes within timeout; an answer, once
// come, is read for as long as its reader wants.
func answeredWithin(timeout time.Duration, next http.RoundTripper, req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	timer := time.AfterFunc(timeout, cancel)
	resp, err := next.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() {
		// Too late: the request was given up on, whatever came back.
		if err == nil {
			_ = resp.Body.Close()
		}
		cancel()
		return nil, fmt.Errorf("watch %s: no answer within %s: %w", req.URL.Path, timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return writegate.RoundTripAnswered(resp, cancel), nil
}

func isWatch(req *http.Request) bool {
	watch := req.URL.Query().Get("watch")
	return watch == "true" || watch == "1"
}
