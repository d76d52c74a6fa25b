package dryrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

// answer makes up the API server's answer to a write it was never sent, from the object as
// the API server has it now (a read, sent over next) and the write: so that the controller
// goes on as after a real write, and the report holds the writes that follow from it too (the
// routing after the LoadBalancer's adoption, the Service's status after its load balancer).
// The answer is the written object as the API server would return it, near enough for the
// controllers: patches are applied as their type says (an apply as a merge of the applied
// fields), a create gets a made-up UID; a create of an object that exists, and a write or
// delete of one that does not or whose UID precondition fails, are refused as the API server
// would. It also says what the write changes (see diff).
func answer(req *http.Request, info *request.RequestInfo, sent []byte, next http.RoundTripper) (*http.Response, []string, error) {
	if info.Verb == "deletecollection" {
		resp, err := respond(req, http.StatusOK, success())
		return resp, []string{"deleted: every object the request selects"}, err
	}
	path := strings.TrimSuffix(req.URL.Path, "/"+info.Subresource)
	if info.Verb == "create" {
		name := nameOf(sent)
		if name == "" {
			// A generated name is a new object.
			resp, err := respond(req, http.StatusCreated, created(sent))
			return resp, []string{"created"}, err
		}
		path = strings.TrimSuffix(path, "/") + "/" + name
	}
	current, failed, err := read(req, path, next)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s %s/%s to answer its write: %w", info.Resource, info.Namespace, info.Name, err)
	}
	if failed != nil {
		return failed, []string{fmt.Sprintf("unknown: reading the object answered %s", failed.Status)}, nil
	}
	patchType := types.PatchType(strings.TrimSpace(strings.Split(req.Header.Get("Content-Type"), ";")[0]))
	creates := info.Verb == "create" || (info.Verb == "patch" && (patchType == types.ApplyPatchType || patchType == types.ApplyCBORPatchType))
	switch {
	case current == nil && creates:
		resp, err := respond(req, http.StatusCreated, created(sent))
		return resp, []string{"created"}, err
	case current == nil:
		resp, err := respond(req, http.StatusNotFound, status(http.StatusNotFound, "NotFound", fmt.Sprintf("%s %q not found", info.Resource, info.Name)))
		return resp, []string{"refused: not found"}, err
	case info.Verb == "create":
		resp, err := respond(req, http.StatusConflict, status(http.StatusConflict, "AlreadyExists", fmt.Sprintf("%s %q already exists", info.Resource, info.Name)))
		return resp, []string{"refused: already exists"}, err
	case info.Verb == "delete":
		if uid := preconditionUID(sent); uid != "" && uid != uidOf(current) {
			resp, err := respond(req, http.StatusConflict, status(http.StatusConflict, "Conflict", fmt.Sprintf("%s %q has another UID than %s", info.Resource, info.Name, uid)))
			return resp, []string{"refused: the UID precondition does not hold"}, err
		}
		resp, err := respond(req, http.StatusOK, success())
		return resp, []string{"deleted"}, err
	case info.Verb == "update":
		resp, err := respond(req, http.StatusOK, sent)
		return resp, diff(current, sent), err
	}
	var patched []byte
	switch patchType {
	case types.JSONPatchType:
		var patch jsonpatch.Patch
		if patch, err = jsonpatch.DecodePatch(sent); err == nil {
			patched, err = patch.Apply(current)
		}
	case types.StrategicMergePatchType:
		patched, err = strategicMerge(current, sent)
	case types.ApplyYAMLPatchType:
		patched, err = apply(current, sent, req.URL.Query().Get("fieldManager"))
	default:
		patched, err = jsonpatch.MergePatch(current, sent)
	}
	if err != nil {
		// As the API server would refuse it: a JSON patch whose test fails, say.
		resp, respErr := respond(req, http.StatusUnprocessableEntity, status(http.StatusUnprocessableEntity, "Invalid", err.Error()))
		return resp, []string{"refused: " + err.Error()}, respErr
	}
	resp, err := respond(req, http.StatusOK, patched)
	return resp, diff(current, patched), err
}

// read gets the object at path (the whole of it, for a subresource) as JSON: nil if it does
// not exist. Any other failure is answered as the API server answered the read.
func read(req *http.Request, path string, next http.RoundTripper) ([]byte, *http.Response, error) {
	get, err := http.NewRequestWithContext(req.Context(), http.MethodGet, req.URL.Scheme+"://"+req.URL.Host+path, nil)
	if err != nil {
		return nil, nil, err
	}
	get.Header = req.Header.Clone()
	get.Header.Del("Content-Type")
	get.Header.Set("Accept", "application/json")
	resp, err := next.RoundTrip(get)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return nil, nil, err
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil, nil
	case resp.StatusCode != http.StatusOK:
		answer, err := respond(req, resp.StatusCode, body)
		return nil, answer, err
	}
	return body, nil, nil
}

// apply applies a server-side apply near enough: the applied fields replace what is there
// (lists by item where their items are named, whole otherwise), and the fields the same manager
// applied before and applies no more are removed, as the API server removes them.
func apply(current, applied []byte, manager string) ([]byte, error) {
	var before struct {
		Metadata struct {
			ManagedFields []struct {
				Manager     string          `json:"manager"`
				Operation   string          `json:"operation"`
				Subresource string          `json:"subresource"`
				FieldsV1    json.RawMessage `json:"fieldsV1"`
			} `json:"managedFields"`
		} `json:"metadata"`
	}
	var was, sent map[string]any
	for _, decode := range []struct {
		data []byte
		into any
	}{{current, &before}, {current, &was}, {applied, &sent}} {
		if err := json.Unmarshal(decode.data, decode.into); err != nil {
			return nil, err
		}
	}
	result, _ := mergeApplied(was, sent).(map[string]any)
	for _, managed := range before.Metadata.ManagedFields {
		if managed.Manager != manager || managed.Operation != "Apply" || managed.Subresource != "" {
			continue
		}
		var owned map[string]any
		if err := json.Unmarshal(managed.FieldsV1, &owned); err != nil {
			return nil, err
		}
		dropUnapplied(owned, sent, result)
	}
	return json.Marshal(result)
}

// mergeApplied is current with applied's fields: maps merged by field, lists of objects
// named by a type or name (owner references, conditions) by item, other lists replaced whole.
func mergeApplied(current, applied any) any {
	switch applied := applied.(type) {
	case map[string]any:
		was, ok := current.(map[string]any)
		if !ok {
			return applied
		}
		merged := make(map[string]any, len(was)+len(applied))
		for key, value := range was {
			merged[key] = value
		}
		for key, value := range applied {
			merged[key] = mergeApplied(was[key], value)
		}
		return merged
	case []any:
		was, ok := current.([]any)
		if !ok {
			return applied
		}
		wasNames, namedBefore := itemNames(was)
		names, named := itemNames(applied)
		if !namedBefore || !named {
			return applied
		}
		merged := make([]any, 0, len(was)+len(applied))
		for i, item := range was {
			if at := slices.Index(names, wasNames[i]); at >= 0 {
				item = mergeApplied(item, applied[at])
			}
			merged = append(merged, item)
		}
		for i, item := range applied {
			if !slices.Contains(wasNames, names[i]) {
				merged = append(merged, item)
			}
		}
		return merged
	}
	return applied
}

// dropUnapplied removes from result the fields owned (a managed fields set, "f:<name>" keys)
// that applied has no more, in maps; items of lists are left as mergeApplied made them.
func dropUnapplied(owned, applied, result map[string]any) {
	for key, ownedBelow := range owned {
		name, ok := strings.CutPrefix(key, "f:")
		if !ok {
			continue
		}
		appliedValue, isApplied := applied[name]
		if !isApplied {
			delete(result, name)
			continue
		}
		ownedMap, _ := ownedBelow.(map[string]any)
		appliedMap, _ := appliedValue.(map[string]any)
		resultMap, _ := result[name].(map[string]any)
		if ownedMap != nil && appliedMap != nil && resultMap != nil {
			dropUnapplied(ownedMap, appliedMap, resultMap)
		}
	}
}

// strategicMerge applies a strategic merge patch to a built-in kind, as a merge patch to any
// other (only built-in kinds take strategic merge patches).
func strategicMerge(current, patch []byte) ([]byte, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(current, &meta); err != nil {
		return nil, err
	}
	object, err := scheme.Scheme.New(schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind))
	if err != nil {
		return jsonpatch.MergePatch(current, patch)
	}
	return strategicpatch.StrategicMergePatch(current, patch, object)
}

// created is the object of a create as the API server would return it: with a UID and a
// creation time. Its resource version stays empty: no cache will ever hold it.
func created(sent []byte) []byte {
	var object map[string]any
	if json.Unmarshal(sent, &object) != nil {
		return sent
	}
	metadata, _ := object["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		object["metadata"] = metadata
	}
	metadata["uid"] = string(uuid.NewUUID())
	metadata["creationTimestamp"] = time.Now().UTC().Format(time.RFC3339)
	if name, _ := metadata["name"].(string); name == "" {
		if prefix, _ := metadata["generateName"].(string); prefix != "" {
			metadata["name"] = prefix + "dryrun"
		}
	}
	data, err := json.Marshal(object)
	if err != nil {
		return sent
	}
	return data
}

// success is the API server's answer to a delete.
func success() []byte {
	return []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}`)
}

// preconditionUID is the UID a delete's options require of the object, if any.
func preconditionUID(options []byte) string {
	var body struct {
		Preconditions struct {
			UID string `json:"uid"`
		} `json:"preconditions"`
	}
	_ = json.Unmarshal(options, &body)
	return body.Preconditions.UID
}

func uidOf(object []byte) string { return metadataOf(object).UID }

func nameOf(object []byte) string { return metadataOf(object).Name }

func metadataOf(object []byte) (metadata struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}) {
	var body struct {
		Metadata struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(object, &body)
	return body.Metadata
}

func status(code int, reason, message string) []byte {
	data, _ := json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{}, "status": "Failure", "reason": reason, "message": message, "code": code})
	return data
}

func respond(req *http.Request, code int, body []byte) (*http.Response, error) {
	return &http.Response{
		StatusCode:    code,
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{runtime.ContentTypeJSON}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}
