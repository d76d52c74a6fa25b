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
	root := RepoRootForTest(t)
	mainMod := readFile(t, filepath.Join(root, "go.mod"))
	for _, b := range Binaries() {
		toolMod := readFile(t, filepath.Join(root, "hack", "tools", b.ToolModule, "go.mod"))
		if !strings.Contains(toolMod, "\n\t"+b.Module+" "+b.Version+"\n") && !strings.Contains(toolMod, "require "+b.Module+" "+b.Version+"\n") {
			t.Errorf("hack/tools/%s/go.mod does not require %s %s", b.ToolModule, b.Module, b.Version)
		}
		if b.Module == "github.com/ironcore-dev/ironcore" && !strings.Contains(mainMod, "\t"+b.Module+" "+b.Version+"\n") {
			t.Errorf("go.mod does not require %s %s, the version of the IronCore servers", b.Module, b.Version)
		}
		if !strings.Contains(b.FileName(), b.Version) {
			t.Errorf("%s: file name %q does not carry the version", b.Name, b.FileName())
		}
	}
}

// TestCompatAPIServersMatchTheirPins: each compat API server's module requires its version of
// k8s.io/kubernetes, with every staging module at the matching v0 version, and the target
// cluster's choice names each.
func TestCompatAPIServersMatchTheirPins(t *testing.T) {
	root := RepoRootForTest(t)
	for _, b := range CompatAPIServers() {
		mod := readFile(t, filepath.Join(root, "hack", "tools", b.ToolModule, "go.mod"))
		if !strings.Contains(mod, "require "+b.Module+" "+b.Version+"\n") && !strings.Contains(mod, "\n\t"+b.Module+" "+b.Version+"\n") {
			t.Errorf("hack/tools/%s/go.mod does not require %s %s", b.ToolModule, b.Module, b.Version)
		}
		staging := "v0" + strings.TrimPrefix(b.Version, "v1")
		if !strings.Contains(mod, "k8s.io/api => k8s.io/api "+staging+"\n") || !strings.Contains(mod, "k8s.io/apiserver => k8s.io/apiserver "+staging+"\n") {
			t.Errorf("hack/tools/%s/go.mod does not replace the staging modules with %s", b.ToolModule, staging)
		}
		t.Setenv(TargetKubernetesEnv, minor(b.Version))
		if chosen, compat, err := targetAPIServer(); err != nil || !compat || chosen.Version != b.Version {
			t.Errorf("%s=%s chose %+v (compat %v, %v), want %s", TargetKubernetesEnv, minor(b.Version), chosen, compat, err, b.Version)
		}
	}
	t.Setenv(TargetKubernetesEnv, DefaultTargetKubernetes())
	if _, compat, err := targetAPIServer(); err != nil || compat {
		t.Errorf("%s=%s: compat %v, %v; want the servers module's", TargetKubernetesEnv, DefaultTargetKubernetes(), compat, err)
	}
	t.Setenv(TargetKubernetesEnv, "1.20")
	if _, _, err := targetAPIServer(); err == nil || !strings.Contains(err.Error(), "1.35, 1.36, 1.37") {
		t.Errorf("an unsupported version: %v, want an error naming the supported ones", err)
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
