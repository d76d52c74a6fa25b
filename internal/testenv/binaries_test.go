package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryVersionsMatchTheirPins keeps the binaries' versions, their tool modules and the
// CCM's own dependencies in step: the IronCore servers must serve the API version the CCM is
// built against, and a version change must change the cached binary's name.
func TestBinaryVersionsMatchTheirPins(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mainMod := readFile(t, filepath.Join(root, "go.mod"))
	toolMod := readFile(t, filepath.Join(root, "hack", "tools", serversModule, "go.mod"))
	for _, b := range Binaries() {
		if !strings.Contains(toolMod, "\n\t"+b.Module+" "+b.Version+"\n") && !strings.Contains(toolMod, "require "+b.Module+" "+b.Version+"\n") {
			t.Errorf("hack/tools/%s/go.mod does not require %s %s", serversModule, b.Module, b.Version)
		}
		if b.Module == "github.com/ironcore-dev/ironcore" && !strings.Contains(mainMod, "\t"+b.Module+" "+b.Version+"\n") {
			t.Errorf("go.mod does not require %s %s, the version of the IronCore servers", b.Module, b.Version)
		}
		if !strings.Contains(b.FileName(), b.Version) {
			t.Errorf("%s: file name %q does not carry the version", b.Name, b.FileName())
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestOutputNamesAreGoBuilds: go build names a binary after its package's last import path
// element that is not a major version; buildAll finds the binaries by these names.
func TestOutputNamesAreGoBuilds(t *testing.T) {
	want := map[string]string{
		"etcd": "server", "kube-apiserver": "kube-apiserver", "kube-controller-manager": "kube-controller-manager",
		"ironcore-apiserver": "ironcore-apiserver", "ironcore-controller-manager": "ironcore-controller-manager",
	}
	for _, b := range Binaries() {
		if got := b.outputName(); got != want[b.Name] {
			t.Errorf("%s: output name %q, want %q", b.Name, got, want[b.Name])
		}
	}
}
