// Package testenv starts the real servers the CCM is tested against: a target Kubernetes
// cluster (etcd and kube-apiserver) and an IronCore control plane (etcd, kube-apiserver,
// ironcore-apiserver, ironcore-controller-manager and a garbage collector), plus a provider
// simulator for the status writers that cannot run here. Tests, the lab and the benchmark share it.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// Binary is one server program the stack runs, built from a pinned Go module.
type Binary struct {
	// Name is the program's name.
	Name string
	// Version is the version of the module it is built from; hack/tools/<ToolModule>/go.mod
	// pins the same version.
	Version string
	// Module is the Go module the binary is built from, and ToolModule the directory under
	// hack/tools whose go.mod pins it.
	Module     string
	ToolModule string
	// Package is the main package to build.
	Package string
	// ColdBuild is roughly how long a build with an empty Go build cache takes on 2 cores.
	ColdBuild time.Duration
}

// Binaries lists the servers the stack runs.
func Binaries() []Binary {
	return []Binary{
		{Name: "etcd", Version: "v3.6.6", Module: "go.etcd.io/etcd/server/v3", ToolModule: "etcd", Package: "go.etcd.io/etcd/server/v3", ColdBuild: time.Minute},
		{Name: "kube-apiserver", Version: "v1.35.3", Module: "k8s.io/kubernetes", ToolModule: "kubernetes", Package: "k8s.io/kubernetes/cmd/kube-apiserver", ColdBuild: 7 * time.Minute},
		{Name: "kube-controller-manager", Version: "v1.35.3", Module: "k8s.io/kubernetes", ToolModule: "kubernetes", Package: "k8s.io/kubernetes/cmd/kube-controller-manager", ColdBuild: 3 * time.Minute},
		{Name: "ironcore-apiserver", Version: "v0.5.0", Module: "github.com/ironcore-dev/ironcore", ToolModule: "ironcore", Package: "github.com/ironcore-dev/ironcore/cmd/ironcore-apiserver", ColdBuild: 3 * time.Minute},
		{Name: "ironcore-controller-manager", Version: "v0.5.0", Module: "github.com/ironcore-dev/ironcore", ToolModule: "ironcore", Package: "github.com/ironcore-dev/ironcore/cmd/ironcore-controller-manager", ColdBuild: time.Minute},
	}
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
	if err := checkBuildSpace(missing, out); err != nil {
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

// buildAll builds the binaries, those of one tool module one after the other (the second
// reuses the first's compiled packages) and the modules side by side: while one build links,
// which uses one core, another compiles.
func buildAll(ctx context.Context, root string, missing []Binary, paths map[string]string, out io.Writer) error {
	var lanes [][]Binary
	laneOf := map[string]int{}
	var estimate time.Duration
	names := make([]string, 0, len(missing))
	for _, b := range missing {
		i, ok := laneOf[b.ToolModule]
		if !ok {
			i = len(lanes)
			laneOf[b.ToolModule] = i
			lanes = append(lanes, nil)
		}
		lanes[i] = append(lanes[i], b)
		estimate += b.ColdBuild
		names = append(names, b.Name)
	}
	fmt.Fprintf(out, "building %s into bin/ (once per version; about %s on 2 cores with an empty Go build cache, build log: %s)\n",
		strings.Join(names, ", "), estimate.Round(time.Minute), buildLogPath(root))
	log, err := os.OpenFile(buildLogPath(root), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()

	start := time.Now()
	var mu sync.Mutex
	building := map[string]bool{}
	done := make(chan struct{})
	defer close(done)
	go func() {
		ticker := time.NewTicker(30 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				mu.Lock()
				now := slices.Sorted(maps.Keys(building))
				mu.Unlock()
				fmt.Fprintf(out, "      still building %s (%s so far)\n", strings.Join(now, ", "), time.Since(start).Round(time.Second))
			}
		}
	}()
	group, groupCtx := errgroup.WithContext(ctx)
	for _, lane := range lanes {
		group.Go(func() error {
			for _, b := range lane {
				mu.Lock()
				building[b.Name] = true
				mu.Unlock()
				began := time.Now()
				if err := build(groupCtx, root, b, paths[b.Name], log, &mu); err != nil {
					return err
				}
				mu.Lock()
				delete(building, b.Name)
				fmt.Fprintf(out, "      built %s in %s\n", b.Name, time.Since(began).Round(time.Second))
				mu.Unlock()
			}
			return nil
		})
	}
	if err := group.Wait(); err != nil {
		return fmt.Errorf("%w\n(the whole build log is %s)", err, buildLogPath(root))
	}
	fmt.Fprintf(out, "      all built in %s\n", time.Since(start).Round(time.Second))
	return nil
}

// buildLogPath is where the builds' output goes; it is shown only when a build fails.
func buildLogPath(root string) string { return filepath.Join(root, "bin", "build.log") }

// build builds one binary to path, appending its output to log (under mu, which the builds
// running side by side share).
func build(ctx context.Context, root string, b Binary, path string, log io.Writer, mu *sync.Mutex) error {
	tmp := path + ".tmp"
	// No symbol table and no DWARF: the servers are not debugged here, and linking is faster.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, b.Package)
	cmd.Dir = filepath.Join(root, "hack", "tools", b.ToolModule)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	err := cmd.Run()
	mu.Lock()
	fmt.Fprintf(log, "== go build %s (in %s): %v\n%s", b.Package, cmd.Dir, err, output.String())
	mu.Unlock()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("build %s %s in %s: %w\n%s", b.Name, b.Version, cmd.Dir, err, lastLines(output.String(), 20))
	}
	return os.Rename(tmp, path)
}

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
