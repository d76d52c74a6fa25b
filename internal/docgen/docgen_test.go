package docgen

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repositoryRoot is where the committed docs are, seen from this package's directory.
const repositoryRoot = "../.."

// TestGeneratedDocsAreCurrent fails when someone changed the code the docs are generated from
// but not the docs.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	stale, err := Stale(repositoryRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range stale {
		t.Errorf("%s is out of date with the code it documents: run `go generate ./...` and commit the result", path)
	}
}

func TestStaleFindsChangedAndMissingFiles(t *testing.T) {
	root := t.TempDir()
	if err := Write(root); err != nil {
		t.Fatal(err)
	}
	if stale, err := Stale(root); err != nil || len(stale) != 0 {
		t.Fatalf("right after Write: stale = %v, err = %v", stale, err)
	}
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	changed, missing := files[0].Path, files[1].Path
	if err := os.WriteFile(filepath.Join(root, changed), []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, missing)); err != nil {
		t.Fatal(err)
	}
	stale, err := Stale(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{changed, missing}; !slices.Equal(stale, want) {
		t.Fatalf("stale = %v, want %v", stale, want)
	}
}

func TestFilesAreDeterministic(t *testing.T) {
	first, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	second, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Path != second[i].Path || !bytes.Equal(first[i].Content, second[i].Content) {
			t.Errorf("%s differs between two runs", first[i].Path)
		}
	}
}

// TestFilesSayWhatTheyDocument spot-checks that each file carries what it is generated from.
func TestFilesSayWhatTheyDocument(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"docs/reference/flags.md": {
			"| `--ironcore-api-qps` | float32 | `200` |",
			"| `--orphan-load-balancer-grace-period` | duration | `10m0s` |",
			"| `--concurrent-service-syncs` | `1` | `100` |",
			"| `--route-reconciliation-period` | `10s` | `2s` |",
			"| `--cloud-provider` | `\"\"` | `ironcore` |",
			"## Routes without `--cluster-cidr`",
		},
		"docs/reference/cloud-config.md": {"| `networkName` | string | yes |", "```yaml\nnetworkName: my-network\n"},
		"docs/reference/annotations.md":  {"## Service", "| `service.beta.kubernetes.io/ironcore-load-balancer-internal` | annotation |", "## IronCore Machine, IronCore NetworkInterface"},
		"docs/events.md":                 {"| `LoadBalancerTypeChanged` | Normal | Service |", "| `ClusterLabelConflict` | Warning | Node |"},
	}
	for _, file := range files {
		if !strings.HasPrefix(string(file.Content), header) {
			t.Errorf("%s does not start with the generated-file header", file.Path)
		}
		for _, text := range want[file.Path] {
			if !strings.Contains(string(file.Content), text) {
				t.Errorf("%s does not contain %q", file.Path, text)
			}
		}
		delete(want, file.Path)
	}
	for path := range want {
		t.Errorf("%s is not generated", path)
	}
}

func TestCellText(t *testing.T) {
	for in, want := range map[string]string{
		"a | b":         `a \| b`,
		"two\nlines  x": "two lines x",
		"":              "",
	} {
		if got := cellText(in); got != want {
			t.Errorf("cellText(%q) = %q, want %q", in, got, want)
		}
	}
}
