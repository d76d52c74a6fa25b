package ironcore

import (
	"encoding/json"
	"testing"
)

// TestLabelOps: every label that changes is tested for the value it was computed from (absent
// as null) before it is set or removed; labels that stay are not touched.
func TestLabelOps(t *testing.T) {
	for _, tc := range []struct {
		name          string
		base, changed map[string]string
		want          string
	}{
		{name: "unchanged", base: map[string]string{"a": "1"}, changed: map[string]string{"a": "1"}, want: `null`},
		{name: "no labels yet", changed: map[string]string{"a": "1"},
			want: `[{"op":"test","path":"/metadata/labels","value":null},{"op":"add","path":"/metadata/labels","value":{"a":"1"}}]`},
		{name: "added, another kept", base: map[string]string{"k": "v"}, changed: map[string]string{"k": "v", "x/y": "1"},
			want: `[{"op":"test","path":"/metadata/labels/x~1y","value":null},{"op":"add","path":"/metadata/labels/x~1y","value":"1"}]`},
		{name: "changed and removed", base: map[string]string{"a": "1", "b": "2"}, changed: map[string]string{"a": "3"},
			want: `[{"op":"test","path":"/metadata/labels/b","value":"2"},{"op":"remove","path":"/metadata/labels/b","value":null},` +
				`{"op":"test","path":"/metadata/labels/a","value":"1"},{"op":"add","path":"/metadata/labels/a","value":"3"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(labelOps(tc.base, tc.changed))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %s\nwant %s", got, tc.want)
			}
		})
	}
}
