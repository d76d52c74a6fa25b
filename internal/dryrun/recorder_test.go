package dryrun

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// apiServer answers reads of one Service, as the API server has it before the writes.
func apiServer(t *testing.T) *httptest.Server {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("the recorder sent %s %s, want only reads", r.Method, r.URL.Path)
		}
		if r.URL.Path != "/api/v1/namespaces/ns/services/web" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"ns","uid":"uid-1","resourceVersion":"1"},"status":{}}`))
	}))
	t.Cleanup(server.Close)
	return server
}

func newRequest(t *testing.T, ctx context.Context, method, url, contentType string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("User-Agent", "ironcore-cloud-controller-manager/v1.0.0 (linux/amd64) kubernetes/abcdef/service-controller")
	return req
}

func protobuf(t *testing.T, object runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion).Encode(object, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustRecord(t *testing.T, record func(*http.Request, http.RoundTripper) (*http.Response, error), req *http.Request) {
	t.Helper()
	resp, err := record(req, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

// TestAChangeIsRecordedOnceHoweverOftenItIsRetried: an update retried on another resource
// version, and an event sent again under another name, are one change each; a different update
// is another.
func TestAChangeIsRecordedOnceHoweverOftenItIsRetried(t *testing.T) {
	recorder := New()
	record := recorder.For(Cluster) //nolint:bodyclose // the answers are closed below
	server := apiServer(t)
	service := server.URL + "/api/v1/namespaces/ns/services/web/status"
	ctx := Because(context.Background(), "the Service's address", nil)
	for _, version := range []string{"1", "2"} {
		update := []byte(`{"metadata":{"name":"web","namespace":"ns","resourceVersion":"` + version + `"},"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.1"}]}}}`)
		resp, err := record(newRequest(t, ctx, http.MethodPut, service, "application/json", update), http.DefaultTransport)
		if err != nil {
			t.Fatal(err)
		}
		// Answered as the API server would: the object written.
		answered, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(answered) != string(update) {
			t.Errorf("an update was answered %d %s, want 200 and the object sent", resp.StatusCode, answered)
		}
	}
	other := []byte(`{"metadata":{"name":"web","namespace":"ns"},"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.2"}]}}}`)
	mustRecord(t, record, newRequest(t, context.Background(), http.MethodPut, service, "application/json", other))
	for _, name := range []string{"web.1", "web.2"} {
		event := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "ns", Name: "web"},
			Type:           corev1.EventTypeNormal, Reason: "EnsuredLoadBalancer", Message: "Ensured load balancer",
		}
		mustRecord(t, record, newRequest(t, context.Background(), http.MethodPost, server.URL+"/api/v1/namespaces/ns/events", "application/vnd.kubernetes.protobuf", protobuf(t, event)))
	}

	writes := recorder.Writes()
	if len(writes) != 3 {
		t.Fatalf("recorded %d writes, want 3: %+v", len(writes), writes)
	}
	event, first, second := writes[0], writes[1], writes[2]
	if event.Resource != "events" || event.Object() != "ns/service/web" || event.Attempts != 2 || event.Client != "service-controller" ||
		string(event.Change) != `{"message":"Ensured load balancer","reason":"EnsuredLoadBalancer","type":"Normal"}` {
		t.Errorf("the event was recorded as %+v (change %s)", event, event.Change)
	}
	if first.Verb != "update" || first.Resource != "services" || first.Subresource != "status" || first.Object() != "ns/web" ||
		first.Attempts != 2 || first.Reason != "the Service's address" ||
		string(first.Change) != `{"metadata":{"name":"web","namespace":"ns"},"status":{"loadBalancer":{"ingress":[{"ip":"10.0.0.1"}]}}}` ||
		!slices.Equal(first.Changes, []string{`status.loadBalancer.ingress: added [{"ip":"10.0.0.1"}]`}) {
		t.Errorf("the retried update was recorded as %+v (change %s)", first, first.Change)
	}
	if second.Attempts != 1 || !json.Valid(second.Change) || string(second.Change) != string(other) {
		t.Errorf("the other patch was recorded as %+v (change %s)", second, second.Change)
	}
}

// TestAnAppliedObjectLosesTheFieldsItsManagerNoLongerApplies: an apply keeps what others set,
// replaces what it sets (lists whole), and removes what the same manager applied before and
// applies no more, as a server-side apply does.
func TestAnAppliedObjectLosesTheFieldsItsManagerNoLongerApplies(t *testing.T) {
	current := []byte(`{"metadata":{"name":"lb","labels":{"a":"1","other":"x"},"managedFields":[
		{"manager":"ccm","operation":"Apply","fieldsV1":{"f:metadata":{"f:labels":{"f:a":{}}},"f:spec":{"f:selector":{"f:matchLabels":{}},"f:ports":{}}}},
		{"manager":"someone","operation":"Update","fieldsV1":{"f:metadata":{"f:labels":{"f:other":{}}}}}]},
		"spec":{"selector":{"matchLabels":{"k":"v"}},"ports":[{"port":80},{"port":443}]},"status":{"ips":["10.0.0.1"]}}`)
	applied := []byte(`{"metadata":{"name":"lb","labels":{"b":"2"}},"spec":{"ports":[{"port":8080}]}}`)
	got, err := apply(current, applied, "ccm")
	if err != nil {
		t.Fatal(err)
	}
	var object struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec   map[string]any `json:"spec"`
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal(got, &object); err != nil {
		t.Fatal(err)
	}
	if labels := object.Metadata.Labels; len(labels) != 2 || labels["b"] != "2" || labels["other"] != "x" {
		t.Errorf("labels %v, want b=2 (applied) and other=x (another manager's), without a (no longer applied)", labels)
	}
	if _, selects := object.Spec["selector"]; selects {
		t.Errorf("the selector the manager no longer applies is kept: %v", object.Spec)
	}
	if ports, _ := json.Marshal(object.Spec["ports"]); string(ports) != `[{"port":8080}]` {
		t.Errorf("ports %s, want the applied list whole", ports)
	}
	if object.Status["ips"] == nil {
		t.Errorf("the status was lost: %v", object.Status)
	}
}

// TestAWriteTheAPIServerWouldRefuseIsRefused: a create of an object that exists, a delete of
// one that does not or under another UID, and a patch of one that does not, are answered as
// the API server would answer them, and recorded as refused; a delete that holds is "deleted".
func TestAWriteTheAPIServerWouldRefuseIsRefused(t *testing.T) {
	recorder := New()
	record := recorder.For(Cluster) //nolint:bodyclose // closed below
	server := apiServer(t)
	services := server.URL + "/api/v1/namespaces/ns/services"
	for _, tc := range []struct {
		method, url, body string
		status            int
		change            string
	}{
		{http.MethodPost, services, `{"metadata":{"name":"web","namespace":"ns"}}`, http.StatusConflict, "refused: already exists"},
		{http.MethodPost, services, `{"metadata":{"name":"new","namespace":"ns"}}`, http.StatusCreated, "created"},
		{http.MethodDelete, services + "/gone", `{}`, http.StatusNotFound, "refused: not found"},
		{http.MethodDelete, services + "/web", `{"preconditions":{"uid":"uid-2"}}`, http.StatusConflict, "refused: the UID precondition does not hold"},
		{http.MethodDelete, services + "/web", `{"preconditions":{"uid":"uid-1"}}`, http.StatusOK, "deleted"},
		{http.MethodPatch, services + "/gone", `{"metadata":{"labels":{"a":"b"}}}`, http.StatusNotFound, "refused: not found"},
	} {
		resp, err := record(newRequest(t, context.Background(), tc.method, tc.url, "application/merge-patch+json", []byte(tc.body)), http.DefaultTransport)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s %s was answered %d, want %d", tc.method, tc.url, tc.body, resp.StatusCode, tc.status)
		}
		if !slices.ContainsFunc(recorder.Writes(), func(w Write) bool { return slices.Equal(w.Changes, []string{tc.change}) }) {
			t.Errorf("%s %s %s: no write recorded as %q", tc.method, tc.url, tc.body, tc.change)
		}
	}
}

// TestAnAppliedOwnerReferenceKeepsWhatOthersSet: items of a list named by a name or type are
// merged by item, as a server-side apply merges an associative list.
func TestAnAppliedOwnerReferenceKeepsWhatOthersSet(t *testing.T) {
	current := []byte(`{"metadata":{"ownerReferences":[{"name":"lb","uid":"1","controller":true}]},"destinations":[{"ip":"a"},{"ip":"b"}]}`)
	applied := []byte(`{"metadata":{"ownerReferences":[{"name":"lb","uid":"1"}]},"destinations":[{"ip":"c"}]}`)
	got, err := apply(current, applied, "ccm")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"destinations":[{"ip":"c"}],"metadata":{"ownerReferences":[{"controller":true,"name":"lb","uid":"1"}]}}`; string(got) != want {
		t.Errorf("applied %s, want %s", got, want)
	}
}

// TestAConditionWrittenAgainAtAnotherTimeIsTheSameChange: the route controller's condition,
// written on every pass with a new heartbeat, is one change tried again.
func TestAConditionWrittenAgainAtAnotherTimeIsTheSameChange(t *testing.T) {
	recorder := New()
	record := recorder.For(Cluster) //nolint:bodyclose // closed in mustRecord
	server := apiServer(t)
	for _, at := range []string{"2026-12-02T04:10:41Z", "2026-12-02T04:10:43Z"} {
		patch := []byte(`{"status":{"conditions":[{"type":"NetworkUnavailable","status":"False","lastHeartbeatTime":"` + at + `","lastTransitionTime":"` + at + `"}]}}`)
		mustRecord(t, record, newRequest(t, context.Background(), http.MethodPatch, server.URL+"/api/v1/namespaces/ns/services/web/status", "application/merge-patch+json", patch))
	}
	if writes := recorder.Writes(); len(writes) != 1 || writes[0].Attempts != 2 {
		t.Errorf("recorded %+v, want one change tried twice", writes)
	}
}
