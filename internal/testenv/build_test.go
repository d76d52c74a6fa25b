package testenv

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryBuildUsesTheSharedFlags: the Makefile's lab, CCM and release builds, its linting and
// tools use the flags the servers are built with; one that differs compiles every
// shared package again (the linter's go list, with its own flags, took 173 s instead of 43 s).
func TestEveryBuildUsesTheSharedFlags(t *testing.T) {
	root := RepoRootForTest(t)
	flags := strings.Replace(strings.Join(sharedBuildFlags(), " "), "-ldflags=-s -w", `-ldflags="-s -w"`, 1)

	makefile := readFile(t, filepath.Join(root, "Makefile"))
	if want := "\nSHARED_BUILD := " + sharedBuildEnv + " go build " + flags + "\n"; !strings.Contains(makefile, want) {
		t.Errorf("the Makefile does not define %q", strings.TrimSpace(want))
	}
	for _, line := range strings.Split(makefile, "\n") {
		if strings.Contains(line, "go build") && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "SHARED_BUILD := ") {
			t.Errorf("a Makefile build does not use $(SHARED_BUILD): %q", strings.TrimSpace(line))
		}
	}
	// The linter's package loading, go run and go install compile too.
	if want := "\nSHARED_ENV = " + sharedBuildEnv + ` GOFLAGS="$(strip -trimpath $(shell go env GOFLAGS))"` + "\n"; !strings.Contains(makefile, want) {
		t.Errorf("the Makefile does not define %q", strings.TrimSpace(want))
	}
	for _, line := range strings.Split(makefile, "\n") {
		compiles := strings.Contains(line, "go run ") || strings.Contains(line, "go install ") || strings.Contains(line, "$(GOLANGCI_LINT) run")
		if compiles && !strings.HasPrefix(line, "#") && !strings.Contains(line, "$(SHARED_ENV)") {
			t.Errorf("a Makefile command that compiles does not use $(SHARED_ENV): %q", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(makefile, "$(SHARED_BUILD) -buildvcs=auto -o bin/ ./cmd/ironcore-ccm-lab ./cmd/ironcore-cloud-controller-manager\n") {
		t.Error("the Makefile does not build the lab and the CCM with $(SHARED_BUILD) and their commit")
	}
	if !strings.Contains(makefile, "$(SHARED_BUILD) -buildvcs=auto -o bin/release/ ./cmd/ironcore-cloud-controller-manager ./cmd/ironcore-ccm-inspect\n") {
		t.Error("the Makefile does not build the release's binaries with $(SHARED_BUILD) and their commit")
	}
}

// TestTheCCMAndTheServersShareModuleVersions: every module that both the CCM (with the lab) and
// a tool module's servers compile is at one version in both, or its packages, and every package
// above them, compile twice in a first run. The one exception is what IronCore v0.5.0's servers
// compile only with: the Kubernetes v0.35 libraries and the controller-runtime of that line.
func TestTheCCMAndTheServersShareModuleVersions(t *testing.T) {
	heldBackByIronCore := map[string]bool{
		"k8s.io/api": true, "k8s.io/apiextensions-apiserver": true, "k8s.io/apimachinery": true, "k8s.io/apiserver": true,
		"k8s.io/client-go": true, "k8s.io/component-base": true, "k8s.io/kms": true, "sigs.k8s.io/controller-runtime": true,
	}
	root := RepoRootForTest(t)
	ccm := moduleVersions(t, root, "./cmd/ironcore-ccm-lab", "./cmd/"+CCMBinaryName)
	serverPackages := map[string][]string{}
	for _, b := range Binaries() {
		serverPackages[b.ToolModule] = append(serverPackages[b.ToolModule], b.Package)
	}
	for toolModule, packages := range serverPackages {
		servers := moduleVersions(t, filepath.Join(root, "hack", "tools", toolModule), packages...)
		shared := 0
		for module, version := range ccm {
			other, ok := servers[module]
			if !ok {
				continue
			}
			shared++
			if other != version && (toolModule != ironcoreModule || !heldBackByIronCore[module]) {
				t.Errorf("%s is %s in go.mod and %s in hack/tools/%s/go.mod; require one version in both", module, version, other, toolModule)
			}
		}
		if shared < 50 {
			t.Errorf("hack/tools/%s: only %d modules in common; the listing is broken", toolModule, shared)
		}
	}
}

// moduleVersions maps each module that the packages, built in dir, compile to the version
// compiled (after replacements).
func moduleVersions(t *testing.T, dir string, packages ...string) map[string]string {
	t.Helper()
	format := "{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}"
	cmd := exec.CommandContext(context.Background(), "go", append([]string{"list", "-deps", "-f", format}, packages...)...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), sharedBuildEnv)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	versions := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if module, version, ok := strings.Cut(line, " "); ok && version != "" {
			versions[module] = version
		}
	}
	return versions
}
