package ironcore

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// instrumentedTransport counts and times every request to the IronCore API, by the verb and
// resource the API server will see (the same names its audit log and RBAC use).
type instrumentedTransport struct {
	next http.RoundTripper
	info *request.RequestInfoFactory
}

func instrument(next http.RoundTripper) http.RoundTripper {
	metrics.Register()
	return &instrumentedTransport{next: next, info: &request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}}
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
