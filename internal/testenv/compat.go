package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// TargetKubernetesEnv chooses the Kubernetes minor version of the target cluster's API server
// ("1.36"); unset, or the minor of the servers module's kube-apiserver, runs that one. make
// test-compat runs the end-to-end smoke tests once per supported minor. The IronCore control
// plane keeps its own kube-apiserver.
const TargetKubernetesEnv = "IRONCORE_CCM_TARGET_KUBERNETES"

// targetAPIServerKey is the key of the target cluster's kube-apiserver in Stack.Binaries.
const targetAPIServerKey = "target-kube-apiserver"

// CompatAPIServers are the target cluster's API servers of other minor versions than the
// servers module's; each is pinned by its own module, hack/tools/kube-<minor>.
func CompatAPIServers() []Binary {
	return []Binary{
		{Name: "kube-apiserver", Version: "v1.35.3", Module: "k8s.io/kubernetes", Package: "k8s.io/kubernetes/cmd/kube-apiserver", ToolModule: "kube-1.35"},
		{Name: "kube-apiserver", Version: "v1.36.3", Module: "k8s.io/kubernetes", Package: "k8s.io/kubernetes/cmd/kube-apiserver", ToolModule: "kube-1.36"},
	}
}

// DefaultTargetKubernetes is the minor version of the servers module's kube-apiserver, which
// the target cluster runs unless TargetKubernetesEnv says otherwise.
func DefaultTargetKubernetes() string {
	for _, server := range Binaries() {
		if server.Name == "kube-apiserver" {
			return minor(server.Version)
		}
	}
	return ""
}

// minor is "1.36" of a version "v1.36.3".
func minor(version string) string {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

// targetAPIServer is the compat API server TargetKubernetesEnv asks for; ok is false for the
// servers module's own.
func targetAPIServer() (b Binary, ok bool, err error) {
	wanted := strings.TrimPrefix(os.Getenv(TargetKubernetesEnv), "v")
	if wanted == "" {
		return Binary{}, false, nil
	}
	var servers []Binary // the servers module's first
	for _, server := range Binaries() {
		if server.Name == "kube-apiserver" {
			servers = append(servers, server)
		}
	}
	servers = append(servers, CompatAPIServers()...)
	supported := make([]string, 0, len(servers))
	for i, server := range servers {
		if minor(server.Version) == minor(wanted) {
			return server, i > 0, nil
		}
		supported = append(supported, minor(server.Version))
	}
	slices.Sort(supported)
	return Binary{}, false, fmt.Errorf("%s=%s: the target cluster can run Kubernetes %s", TargetKubernetesEnv, wanted, strings.Join(supported, ", "))
}

// ensureTargetAPIServer sets paths[targetAPIServerKey] to the target cluster's kube-apiserver,
// building a compat one into bin/ if it is missing. The caller holds no lock.
func ensureTargetAPIServer(ctx context.Context, root string, paths map[string]string, out io.Writer) error {
	server, compat, err := targetAPIServer()
	if err != nil {
		return err
	}
	if !compat {
		paths[targetAPIServerKey] = paths["kube-apiserver"]
		return nil
	}
	path := filepath.Join(root, "bin", server.FileName())
	paths[targetAPIServerKey] = path
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	unlock, err := lockFile(ctx, filepath.Join(root, "bin", ".lock"), out)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	fmt.Fprintf(out, "building kube-apiserver %s for the target cluster into bin/ (once; about 8 minutes on 2 cores)\n", server.Version)
	start := time.Now()
	building := path + ".building"
	cmd := sharedBuild(ctx, filepath.Join(root, "hack", "tools", server.ToolModule), building, server.Package)
	cmd.Env = append(cmd.Env, "GOFLAGS=-mod=readonly")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build kube-apiserver %s in %s: %w\n%s", server.Version, cmd.Dir, err, lastLines(string(output), 20))
	}
	if err := os.Rename(building, path); err != nil {
		return err
	}
	fmt.Fprintf(out, "      built in %s\n", time.Since(start).Round(time.Second))
	return nil
}
