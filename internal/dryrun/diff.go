package dryrun

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// diff says what a write changes, a line per field from the object before (current) to after
// it (none if nothing changes), in field order: "spec.type: Internal -> Public", "metadata.labels.a: added 1". Lists are
// compared whole, but for a routing's destinations, which are named by target.
func diff(current, written []byte) []string {
	var before, after map[string]any
	if json.Unmarshal(current, &before) != nil || json.Unmarshal(written, &after) != nil {
		return []string{"unknown: the object or the write is not a JSON object"}
	}
	old, updated := map[string]string{}, map[string]string{}
	flatten("", before, old)
	flatten("", after, updated)
	var lines []string
	for _, path := range slices.Sorted(maps.Keys(union(old, updated))) {
		was, had := old[path]
		is, has := updated[path]
		switch {
		case path == "destinations":
			if line := destinationsDiff(before["destinations"], after["destinations"]); line != "" {
				lines = append(lines, line)
			}
		case !had:
			lines = append(lines, fmt.Sprintf("%s: added %s", path, short(is)))
		case !has:
			lines = append(lines, fmt.Sprintf("%s: removed (was %s)", path, short(was)))
		case was != is:
			lines = append(lines, fmt.Sprintf("%s: %s -> %s", path, short(was), short(is)))
		}
	}
	return lines
}

// flatten records the leaves of value under path: maps by field (an empty one is no field),
// lists of objects named by a type or name (conditions, owner references) by that, anything
// else whole as JSON. The fields the API server keeps for itself, and times, are left out.
func flatten(path string, value any, into map[string]string) {
	switch value := value.(type) {
	case map[string]any:
		for key, field := range value {
			child := key
			if path != "" {
				child = path + "." + key
			}
			switch child {
			case "metadata.resourceVersion", "metadata.managedFields", "metadata.generation", "metadata.uid", "metadata.creationTimestamp", "apiVersion", "kind":
				continue
			}
			if timeField(key) {
				continue
			}
			flatten(child, field, into)
		}
		return
	case []any:
		if names, ok := itemNames(value); ok && path != "destinations" {
			for i, item := range value {
				flatten(path+"["+names[i]+"]", item, into)
			}
			return
		}
	}
	data, _ := json.Marshal(value)
	into[path] = string(data)
}

// itemNames names the items of a list of objects by their type or name, if each has one of
// its own.
func itemNames(list []any) ([]string, bool) {
	names := make([]string, 0, len(list))
	for _, item := range list {
		object, _ := item.(map[string]any)
		name, _ := object["type"].(string)
		if name == "" {
			name, _ = object["name"].(string)
		}
		if name == "" || slices.Contains(names, name) {
			return nil, false
		}
		names = append(names, name)
	}
	return names, len(names) > 0
}

// destinationsDiff names the targets a routing's write adds and removes.
func destinationsDiff(before, after any) string {
	old, updated := targets(before), targets(after)
	var added, removed []string
	for name := range updated {
		if !old[name] {
			added = append(added, name)
		}
	}
	for name := range old {
		if !updated[name] {
			removed = append(removed, name)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return ""
	}
	slices.Sort(added)
	slices.Sort(removed)
	return fmt.Sprintf("destinations: %d -> %d targets; in: %s; out: %s", len(old), len(updated), listOrNone(added), listOrNone(removed))
}

// targets names the targets of a routing's destinations.
func targets(destinations any) map[string]bool {
	names := map[string]bool{}
	list, _ := destinations.([]any)
	for _, destination := range list {
		entry, _ := destination.(map[string]any)
		ref, _ := entry["targetRef"].(map[string]any)
		if name, _ := ref["name"].(string); name != "" {
			names[name] = true
		}
	}
	return names
}

// DestinationsOut names the targets a routing's write takes out, from its change line.
func DestinationsOut(changes []string) []string {
	for _, line := range changes {
		if !strings.HasPrefix(line, "destinations:") {
			continue
		}
		_, out, _ := strings.Cut(line, "; out: ")
		if out == "none" {
			return nil
		}
		return strings.Split(out, ", ")
	}
	return nil
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func union(a, b map[string]string) map[string]string {
	all := maps.Clone(a)
	maps.Copy(all, b)
	return all
}

// short is a value as a change line shows it.
func short(value string) string {
	const most = 120
	if len(value) > most {
		return value[:most] + "..."
	}
	return value
}
