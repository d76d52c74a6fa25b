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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
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
	var missing []Binary
	for _, b := range Binaries() {
		path := filepath.Join(binDir, b.FileName())
		paths[b.Name] = path
		if _, err := os.Stat(path); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return paths, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(binDir, ".lock"), out)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for i, b := range missing {
		path := paths[b.Name]
		if _, err := os.Stat(path); err == nil {
			continue // built by another process while this one waited for the lock
		}
		fmt.Fprintf(out, "[%d/%d] building %s %s from Go modules (about %s with a cold build cache)...\n", i+1, len(missing), b.Name, b.Version, b.ColdBuild)
		if err := build(ctx, root, b, path, out); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

func build(ctx context.Context, root string, b Binary, path string, out io.Writer) error {
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("building %s needs the go command on PATH: %w", b.Name, err)
	}
	tmp := path + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, b.Package)
	cmd.Dir = filepath.Join(root, "hack", "tools", b.ToolModule)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	start := time.Now()
	done := make(chan struct{})
	go func() {
		ticker := time.NewTicker(30 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				fmt.Fprintf(out, "      still building %s (%s so far)\n", b.Name, time.Since(start).Round(time.Second))
			}
		}
	}()
	err := cmd.Run()
	close(done)
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("build %s %s in %s: %w\n%s", b.Name, b.Version, cmd.Dir, err, output.String())
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	fmt.Fprintf(out, "      built %s in %s\n", b.Name, time.Since(start).Round(time.Second))
	return nil
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
