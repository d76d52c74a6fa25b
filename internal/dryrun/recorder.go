// Package dryrun records the writes a CCM run with --dry-run would have made, instead of making
// them: the write gates of both APIs hand every write to a Recorder, which keeps each change
// once, however often a controller retries it, and serves them for a report.
package dryrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/metrics"
)

// The APIs a write goes to.
const (
	IronCore = "ironcore"
	Cluster  = "cluster"
)

// ErrDryRun is wrapped by the error of a write a dry run cannot answer.
var ErrDryRun = errors.New("dry run: the write was recorded, not sent")

// maxChange bounds the request body the report keeps of one write; a routing of 1,000
// destinations is about 140 KB. The write is answered from the whole of it.
const maxChange = 1 << 20

// Write is one change the CCM would have made.
type Write struct {
	API         string `json:"api"`
	Verb        string `json:"verb"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	// Change is the request's body as JSON, without the resource version it was sent on.
	Change json.RawMessage `json:"change,omitempty"`
	// Truncated says Change was longer than the recorder keeps, and is left out.
	Truncated bool `json:"truncated,omitempty"`
	// Changes say what the write changes, field by field, against the object as it was when
	// the write was recorded: "created", "deleted", or lines such as "spec.type: A -> B".
	Changes []string `json:"changes,omitempty"`
	// Reason is why the CCM would write, where the writer said (Because).
	Reason string `json:"reason,omitempty"`
	// Excluded names, for a write of load balancer targets, the targets left out, and why.
	Excluded map[string]string `json:"excluded,omitempty"`
	// Client is the client that wrote it: the controller, for the cluster's clients.
	Client string `json:"client,omitempty"`
	// First and Last are when it was first and last attempted; Attempts how often.
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Attempts int       `json:"attempts"`
}

// Object names the written object: namespace/name, or name.
func (w Write) Object() string {
	if w.Namespace == "" {
		return w.Name
	}
	return w.Namespace + "/" + w.Name
}

// Recorder keeps the writes of a dry run, each change once.
type Recorder struct {
	info *request.RequestInfoFactory
	now  func() time.Time

	mu     sync.Mutex
	writes map[string]*Write
	// events holds the key of each event created, by its namespace/name, for its updates.
	events map[string]string
}

// New returns an empty recorder.
func New() *Recorder {
	metrics.Register()
	return &Recorder{
		info: &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")},
		now:  time.Now,
	}
}

// For returns what the write gate of api calls with each write in place of sending it
// (writegate.Gate.RecordInstead): it records the write and answers it as the API server
// would have (see answer), reading the object over next.
func (r *Recorder) For(api string) func(*http.Request, http.RoundTripper) (*http.Response, error) {
	return func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		return r.record(api, req, next)
	}
}

func (r *Recorder) record(api string, req *http.Request, next http.RoundTripper) (*http.Response, error) {
	sent, err := body(req)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	info, infoErr := r.info.NewRequestInfo(req)
	if infoErr != nil || !info.IsResourceRequest {
		return nil, fmt.Errorf("%w: %s %s is not a request on a resource", ErrDryRun, req.Method, req.URL.Path)
	}
	write := Write{API: api, Verb: info.Verb, Resource: info.Resource, Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name, Client: client(req.UserAgent())}
	if info.APIGroup != "" {
		write.Resource += "." + info.APIGroup
	}
	if reason, ok := req.Context().Value(reasonKey{}).(Reason); ok {
		write.Reason, write.Excluded = reason.Why, reason.Excluded
	}
	switch {
	case err != nil:
		write.Changes = []string{"unknown: the write's body cannot be read: " + err.Error()}
	case len(sent) > maxChange:
		write.Truncated = true
	default:
		write.Change = normalized(sent)
	}
	if err != nil {
		r.add(write)
		return nil, fmt.Errorf("%w: %s %s %s: %w", ErrDryRun, write.Verb, write.Resource, write.Object(), err)
	}
	if write.Resource == "events" {
		return r.recordEvent(write, req, sent)
	}
	resp, changes, err := answer(req, info, sent, next)
	if err != nil {
		// Not even the read went through: nothing is known of what the write would do.
		return nil, err
	}
	write.Changes = changes
	r.add(write)
	klog.V(2).InfoS("Dry run: a write recorded, not sent", "api", api, "verb", write.Verb, "resource", write.Resource, "subresource", write.Subresource, "object", write.Object(), "changes", len(changes))
	return resp, nil
}

// add keeps write, or counts another attempt of the same change; it returns the change's key.
func (r *Recorder) add(write Write) string {
	change := stable(write.Change)
	if write.Resource == "events" {
		// "checking again in 250ms", then in 500ms: the same event.
		change = withoutNumbers(change)
	}
	key := strings.Join([]string{write.API, write.Verb, write.Resource, write.Subresource, write.Namespace, write.Name, digest(change)}, "|")
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.writes == nil {
		r.writes = map[string]*Write{}
	}
	kept, ok := r.writes[key]
	if !ok {
		write.First = now
		kept = &write
		r.writes[key] = kept
		metrics.DryRunChanges.WithLabelValues(write.API, write.Verb, write.Resource).Inc()
	}
	if write.Reason != "" {
		kept.Reason, kept.Excluded = write.Reason, write.Excluded
	}
	if write.Changes != nil {
		kept.Changes = write.Changes
	}
	kept.Last = now
	kept.Attempts++
	metrics.DryRunWriteAttempts.WithLabelValues(write.API, write.Verb, write.Resource).Inc()
	return key
}

// again counts write as another attempt of the change recorded under key.
func (r *Recorder) again(write Write, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if kept := r.writes[key]; kept != nil {
		kept.Last = r.now()
		kept.Attempts++
	}
	metrics.DryRunWriteAttempts.WithLabelValues(write.API, write.Verb, write.Resource).Inc()
}

// Writes returns the recorded writes, by API, resource, object and first attempt.
func (r *Recorder) Writes() []Write {
	r.mu.Lock()
	writes := make([]Write, 0, len(r.writes))
	for _, write := range r.writes {
		writes = append(writes, *write)
	}
	r.mu.Unlock()
	slices.SortFunc(writes, func(a, b Write) int {
		if c := strings.Compare(a.API+" "+a.Resource+" "+a.Object(), b.API+" "+b.Resource+" "+b.Object()); c != 0 {
			return c
		}
		return a.First.Compare(b.First)
	})
	return writes
}

// ServeHTTP answers with the recorded writes as JSON.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(Report{Writes: r.Writes()}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// Report is what the dry run's endpoint serves.
type Report struct {
	Writes []Write `json:"writes"`
}

// body returns a write's body as JSON.
func body(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	data, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	contentType := req.Header.Get("Content-Type")
	switch {
	case strings.Contains(contentType, "protobuf"):
		object, kind, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", contentType, err)
		}
		object.GetObjectKind().SetGroupVersionKind(*kind)
		return json.Marshal(object)
	case strings.Contains(contentType, "yaml"):
		if data, err = yaml.YAMLToJSON(data); err != nil {
			return nil, fmt.Errorf("decode %s: %w", contentType, err)
		}
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("decode %s: not JSON", contentType)
	}
	return data, nil
}

// normalized is a write's body without the resource version it was sent on: a retry of the
// same change on a newer version is the same change.
func normalized(sent []byte) json.RawMessage {
	var decoded any
	if json.Unmarshal(sent, &decoded) != nil {
		return sent
	}
	if object, ok := decoded.(map[string]any); ok {
		if metadata, ok := object["metadata"].(map[string]any); ok {
			delete(metadata, "resourceVersion")
			delete(metadata, "managedFields")
			if len(metadata) == 0 {
				delete(object, "metadata")
			}
		}
	}
	data, err := json.Marshal(decoded)
	if err != nil {
		return sent
	}
	return data
}

// stable is a change without the times in it (a condition's heartbeat), which differ on every
// attempt of the same change.
func stable(change json.RawMessage) []byte {
	var decoded any
	if json.Unmarshal(change, &decoded) != nil {
		return change
	}
	var strip func(any)
	strip = func(value any) {
		switch value := value.(type) {
		case map[string]any:
			for key, field := range value {
				if timeField(key) {
					delete(value, key)
					continue
				}
				strip(field)
			}
		case []any:
			for _, item := range value {
				strip(item)
			}
		}
	}
	strip(decoded)
	data, err := json.Marshal(decoded)
	if err != nil {
		return change
	}
	return data
}

// timeField tells the fields of the times of conditions and heartbeats.
func timeField(key string) bool {
	switch key {
	case "lastHeartbeatTime", "lastTransitionTime", "lastProbeTime", "lastUpdateTime":
		return true
	}
	return false
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// client is the part of a user agent after its last slash: the controller, for the clients
// the framework builds per controller ("<binary>/<version> (...) kubernetes/<commit>/<name>").
func client(userAgent string) string {
	if i := strings.LastIndexByte(userAgent, '/'); i >= 0 && strings.Count(userAgent, "/") > 3 {
		return userAgent[i+1:]
	}
	return userAgent
}

// Reason is why a write is made, for the report.
type Reason struct {
	Why string
	// Excluded names the targets left out of a write of load balancer targets, and why.
	Excluded map[string]string
}

type reasonKey struct{}

// Because returns ctx carrying why the writes made with it are made; a dry run reports it.
func Because(ctx context.Context, why string, excluded map[string]string) context.Context {
	return context.WithValue(ctx, reasonKey{}, Reason{Why: why, Excluded: excluded})
}
