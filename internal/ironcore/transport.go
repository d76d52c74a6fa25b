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

// instrumentedTransport counts and times requests by verb and resource, as RBAC names them.
type instrumentedTransport struct {
	next http.RoundTripper
	info *request.RequestInfoFactory
}

func instrument(next http.RoundTripper) http.RoundTripper {
	metrics.Register()
	return &instrumentedTransport{next: next, info: newRequestInfoFactory()}
}

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

// describe names a request's verb and group-qualified resource.
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

// RequestTimeout, plus RequestTimeoutPerMiB sent, bounds each request but watches and lists. A
// hung request holds the controller key it serves, so the bound is short, yet ample next to the
// slowest measured (a 300 KB routing in 3.2 s while 2,000 Nodes joined). A list reads a whole
// collection and serves no one key: it gets ListTimeout.
const (
	RequestTimeout       = 10 * time.Second
	RequestTimeoutPerMiB = 10 * time.Second
	ListTimeout          = 30 * time.Second
)

// WatchAnswerTimeout bounds the wait for a watch's answer: one never answered would hold its
// informer for good. It is generous, as priority and fairness may queue a watch a while, and
// with WatchList an informer's first list is a watch.
const WatchAnswerTimeout = 30 * time.Second

// boundedTransport gives requests without one a deadline: the upstream controllers call the
// provider without deadlines, and a request never answered would hold a worker for good.
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

// answeredWithin gives up on req if no answer comes within timeout; an answer is then read
// for as long as its reader wants.
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
