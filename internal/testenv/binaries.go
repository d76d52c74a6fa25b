// Package testenv starts the real servers the CCM is tested against: a target Kubernetes
// cluster (etcd and kube-apiserver) and an IronCore control plane (etcd, kube-apiserver,
// ironcore-apiserver, ironcore-controller-manager and a garbage collector), plus a provider
// simulator for the status writers that cannot run here. Tests, the lab and the benchmark share it.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binary is one server program the stack runs, built from a pinned Go module.
type Binary struct {
	// Name is the program's name.
	Name string
	// Version is the version of the module it is built from; its tool module's go.mod pins
	// the same version.
	Version string
	// Module is the Go module the binary is built from.
	Module string
	// Package is the main package to build.
	Package string
	// ToolModule is the directory, under hack/tools, of the Go module that pins it.
	ToolModule string
}

// The tool modules that pin the stack's servers. serversModule holds etcd and Kubernetes at the
// Kubernetes version of the CCM's own libraries, every shared module at the CCM's version, so
// the packages they share with the CCM compile once. ironcoreModule holds IronCore's servers:
// IronCore v0.5.0's API server compiles only against the Kubernetes v0.35 libraries, so those
// (and controller-runtime) compile a second time for it; every other module it shares with the
// CCM is at the CCM's version (TestTheCCMAndTheServersShareModuleVersions).
const (
	serversModule  = "servers"
	ironcoreModule = "ironcore"
)

// buildTime is how long building all servers took on 2 cores after the CCM's first build with the
// shared flags (make demo, make test build the CCM first): 6m34s and 6m54s from fresh clones
// (docs/benchmarks/first-run.md), about 3 minutes of it the k8s.io v0.35 libraries IronCore's
// API server needs; with an empty Go build cache it takes longer.
const buildTime = "on 2 cores about 7 minutes after the CCM's first build, longer with an empty Go build cache"

// Binaries lists the servers the stack runs.
func Binaries() []Binary {
	return []Binary{
		{Name: "etcd", Version: "v3.7.0", Module: "go.etcd.io/etcd/server/v3", Package: "go.etcd.io/etcd/server/v3", ToolModule: serversModule},
		{Name: "kube-apiserver", Version: "v1.37.2", Module: "k8s.io/kubernetes", Package: "k8s.io/kubernetes/cmd/kube-apiserver", ToolModule: serversModule},
		{Name: "kube-controller-manager", Version: "v1.37.2", Module: "k8s.io/kubernetes", Package: "k8s.io/kubernetes/cmd/kube-controller-manager", ToolModule: serversModule},
		{Name: "ironcore-apiserver", Version: "v0.5.0", Module: "github.com/ironcore-dev/ironcore", Package: "github.com/ironcore-dev/ironcore/cmd/ironcore-apiserver", ToolModule: ironcoreModule},
		{Name: "ironcore-controller-manager", Version: "v0.5.0", Module: "github.com/ironcore-dev/ironcore", Package: "github.com/ironcore-dev/ironcore/cmd/ironcore-controller-manager", ToolModule: ironcoreModule},
	}
}

// outputName is the file go build names a main package's binary: the last element of its
// import path that is not a major version suffix.
func (b Binary) outputName() string {
	parts := strings.Split(b.Package, "/")
	name := parts[len(parts)-1]
	if len(parts) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = parts[len(parts)-2]
	}
	return name
}

// FileName is the binary's file name in bin/: name and version, so a version change rebuilds.
func (b Binary) FileName() string { return b.Name + "-" + b.Version }

// RepoRoot finds the repository root: the nearest directory above the working directory whose
// go.mod declares this module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/ironcore-dev/ironcore-cloud-controller-manager\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the ironcore-cloud-controller-manager repository")
		}
		dir = parent
	}
}

// EnsureBinaries builds every missing binary into <root>/bin, reporting progress to out. It
// holds a lock on bin/, so parallel test packages wait for one build instead of racing.
func EnsureBinaries(ctx context.Context, root string, out io.Writer) (map[string]string, error) {
	binDir := filepath.Join(root, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for _, b := range Binaries() {
		paths[b.Name] = filepath.Join(binDir, b.FileName())
	}
	if len(missingBinaries(paths)) == 0 {
		return paths, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(binDir, ".lock"), out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have built some while this one waited for the lock.
	missing := missingBinaries(paths)
	if len(missing) == 0 {
		return paths, nil
	}
	if _, err := exec.LookPath("go"); err != nil {
		return nil, fmt.Errorf("building the servers needs the go command on PATH: %w", err)
	}
	if err := checkBuildSpace(out); err != nil {
		return nil, err
	}
	if err := buildAll(ctx, root, missing, paths, out); err != nil {
		return nil, err
	}
	return paths, nil
}

// missingBinaries lists the binaries whose file is not in bin/.
func missingBinaries(paths map[string]string) []Binary {
	var missing []Binary
	for _, b := range Binaries() {
		if _, err := os.Stat(paths[b.Name]); err != nil {
			missing = append(missing, b)
		}
	}
	return missing
}

// buildAll builds the missing binaries, one go build per tool module, the builds at once: each
// compiles the packages its binaries share once, and two keep both cores busy while the other
// links. Each binary is moved into bin/ under its versioned name.
func buildAll(ctx context.Context, root string, missing []Binary, paths map[string]string, out io.Writer) error {
	names := make([]string, 0, len(missing))
	var modules []string
	packages := map[string][]string{}
	for _, b := range missing {
		names = append(names, b.Name)
		if packages[b.ToolModule] == nil {
			modules = append(modules, b.ToolModule)
		}
		packages[b.ToolModule] = append(packages[b.ToolModule], b.Package)
	}
	logPath := buildLogPath(root)
	fmt.Fprintf(out, "building %s into bin/ (once per version; %s; build log: %s)\n",
		strings.Join(names, ", "), buildTime, logPath)
	// A build killed mid-way leaves its directory; this one holds the lock, so none is in use.
	stale, _ := filepath.Glob(filepath.Join(root, "bin", ".build-*"))
	for _, dir := range stale {
		_ = os.RemoveAll(dir)
	}
	outDir, err := os.MkdirTemp(filepath.Join(root, "bin"), ".build-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(outDir) }()

	start := time.Now()
	stopProgress := reportBuildProgress(out, missing, outDir, start)
	outputs := make([][]byte, len(modules))
	errs := make([]error, len(modules))
	var wg sync.WaitGroup
	for i, module := range modules {
		wg.Go(func() {
			dir := filepath.Join(root, "hack", "tools", module)
			cmd := sharedBuild(ctx, dir, outDir+"/", packages[module]...)
			// The tool module's go.mod and go.sum are never rewritten by a build, whatever GOFLAGS says.
			cmd.Env = append(cmd.Env, "GOFLAGS=-mod=readonly")
			outputs[i], errs[i] = cmd.CombinedOutput()
			if errs[i] != nil {
				errs[i] = fmt.Errorf("build the servers in %s: %w\n%s\n(the whole build log is %s)", dir, errs[i], lastLines(string(outputs[i]), 20), logPath)
			}
		})
	}
	wg.Wait()
	stopProgress()
	err = errors.Join(errs...)
	if writeErr := os.WriteFile(logPath, bytes.Join(outputs, nil), 0o644); writeErr != nil {
		err = errors.Join(err, writeErr)
	}
	if err != nil {
		return err
	}
	for _, b := range missing {
		if err := os.Rename(filepath.Join(outDir, b.outputName()), paths[b.Name]); err != nil {
			return fmt.Errorf("build %s: %w", b.Name, err)
		}
	}
	fmt.Fprintf(out, "      all built in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// reportBuildProgress tells out every 30 seconds which binaries are linked so far, until the
// returned function is called.
func reportBuildProgress(out io.Writer, building []Binary, outDir string, start time.Time) func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(30 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
			}
			var linked []string
			for _, b := range building {
				if _, err := os.Stat(filepath.Join(outDir, b.outputName())); err == nil {
					linked = append(linked, b.Name)
				}
			}
			progress := "none linked yet"
			if len(linked) > 0 {
				progress = "linked: " + strings.Join(linked, ", ")
			}
			fmt.Fprintf(out, "      still building (%s so far; %d of %d, %s)\n", time.Since(start).Round(time.Second), len(linked), len(building), progress)
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// buildLogPath is where the build's output goes; it is shown only when the build fails.
func buildLogPath(root string) string { return filepath.Join(root, "bin", "build.log") }

// lastLines is the end of a build's output: the error is there.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// lockFile takes an exclusive lock on path, telling out when it has to wait.
func lockFile(ctx context.Context, path string, out io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for waited := false; ; waited = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !waited {
			fmt.Fprintf(out, "waiting for another process building the test binaries...\n")
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
