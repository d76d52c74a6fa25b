package dryrun

import (
	"encoding/json"
	"net/http"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
)

// recordEvent records an event by the object it is about and what it says, and takes an
// update of its count (the event recorder's patch of an event it sent before) for another
// attempt of it. It is answered without a read: the event was never created.
func (r *Recorder) recordEvent(write Write, req *http.Request, sent []byte) (*http.Response, error) {
	name := write.Namespace + "/" + write.Name
	switch write.Verb {
	case "create":
		var event corev1.Event
		if json.Unmarshal(sent, &event) == nil && event.InvolvedObject.Name != "" {
			name = write.Namespace + "/" + event.Name
			involved := event.InvolvedObject
			write.Namespace, write.Name = involved.Namespace, strings.ToLower(involved.Kind)+"/"+involved.Name
			write.Change, _ = json.Marshal(map[string]string{"type": event.Type, "reason": event.Reason, "message": event.Message})
		}
		key := r.add(write)
		r.mu.Lock()
		if r.events == nil {
			r.events = map[string]string{}
		}
		r.events[name] = key
		r.mu.Unlock()
		return respond(req, http.StatusCreated, created(sent))
	case "patch":
		r.mu.Lock()
		key, known := r.events[name]
		r.mu.Unlock()
		if known {
			r.again(write, key)
		} else {
			r.add(write)
		}
		object, err := jsonpatch.MergePatch([]byte(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"`+write.Name+`","namespace":"`+write.Namespace+`"}}`), sent)
		if err != nil {
			return respond(req, http.StatusUnprocessableEntity, status(http.StatusUnprocessableEntity, "Invalid", err.Error()))
		}
		return respond(req, http.StatusOK, object)
	}
	r.add(write)
	return respond(req, http.StatusOK, []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}`))
}

// withoutNumbers is text with each run of digits (and the points between them) as one "#".
func withoutNumbers(text []byte) []byte {
	out := make([]byte, 0, len(text))
	for i, c := range text {
		digit := c >= '0' && c <= '9'
		if c == '.' && i > 0 && i+1 < len(text) && text[i-1] >= '0' && text[i-1] <= '9' && text[i+1] >= '0' && text[i+1] <= '9' {
			digit = true
		}
		if !digit {
			out = append(out, c)
		} else if len(out) == 0 || out[len(out)-1] != '#' {
			out = append(out, '#')
		}
	}
	return out
}
