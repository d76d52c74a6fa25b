package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"

	"k8s.io/client-go/util/flowcontrol"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/config"
	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/ironcore"
)

// CCMBinaryName is the name of the CCM's binary.
const CCMBinaryName = "ironcore-cloud-controller-manager"

// vcsStamp has the go command record the commit in the CCM binary when it is built from a git
// checkout, and build without one elsewhere.
const vcsStamp = "-buildvcs=auto"

// BuildCCM builds the CCM binary from the repository into dir and returns its path. It is built
// with the flags the servers are built with, so that it compiles only what they do not share;
// with race, it is built as go test -race builds, so that it shares the tests' compile, and has
// the race detector, which reports to its output.
func BuildCCM(ctx context.Context, dir string, race bool) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, CCMBinaryName)
	var cmd *exec.Cmd
	// The binary records its commit (internal/version) even where GOFLAGS turns that off.
	if race {
		cmd = exec.CommandContext(ctx, "go", "build", "-race", vcsStamp, "-o", path, "./cmd/"+CCMBinaryName)
		cmd.Dir = root
	} else {
		cmd = sharedBuild(ctx, root, path, vcsStamp, "./cmd/"+CCMBinaryName)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", CCMBinaryName, err, out)
	}
	return path, nil
}

// BuildRelease builds the release's binaries (the CCM and the inspect tool) into dir as make
// release does.
func BuildRelease(ctx context.Context, dir string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := sharedBuild(ctx, root, dir+string(filepath.Separator), vcsStamp, "./cmd/"+CCMBinaryName, "./cmd/ironcore-ccm-inspect")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the release binaries: %w\n%s", err, out)
	}
	return nil
}

// CCMArgs are the flags to run the CCM against the stack: its kubeconfigs and cloud-config,
// secure serving on a free loopback port, and short periods so tests need not wait long.
// extra flags are appended and win over these.
func (s *Stack) CCMArgs(extra ...string) ([]string, int, error) {
	port, err := FreePort()
	if err != nil {
		return nil, 0, err
	}
	args := []string{
		"--cloud-provider=ironcore",
		"--kubeconfig=" + s.CCMTargetKubeconfig,
		// In a pod these default to the in-cluster configuration; here they must be given
		// for the secure port to authenticate and authorize scrapers.
		"--authentication-kubeconfig=" + s.CCMTargetKubeconfig,
		"--authorization-kubeconfig=" + s.CCMTargetKubeconfig,
		"--ironcore-kubeconfig=" + s.CCMIronCoreKubeconfig,
		"--cloud-config=" + s.CloudConfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + s.Dir,
		"--leader-elect=false",
		"--node-monitor-period=1s",
		"--v=2",
	}
	return append(args, extra...), port, nil
}

// StartCCM runs the CCM binary with CCMArgs, logging to <stack dir>/<name>.log.
func (s *Stack) StartCCM(binary, name string, extra ...string) (*Process, int, error) {
	args, port, err := s.CCMArgs(extra...)
	if err != nil {
		return nil, 0, err
	}
	process, err := StartProcess(s.Dir, name, binary, args...)
	return process, port, err
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// StartIronCoreClient starts the CCM's IronCore access layer against the stack, through the
// proxy, as the CCM does, until ctx ends; it returns once the cache has synced.
func (s *Stack) StartIronCoreClient(ctx context.Context) (*ironcore.Client, error) {
	return s.StartIronCoreClientLimitedBy(ctx, nil)
}

// StartIronCoreClientLimitedBy is StartIronCoreClient with the given rate limiter for all the
// client's requests, or the one the CCM's flags give if it is nil.
func (s *Stack) StartIronCoreClientLimitedBy(ctx context.Context, limiter flowcontrol.RateLimiter) (*ironcore.Client, error) {
	options := config.NewOptions()
	options.IronCoreKubeconfig = s.CCMIronCoreKubeconfig
	cfg, namespace, err := options.IronCoreRESTConfig()
	if err != nil {
		return nil, err
	}
	if limiter != nil {
		cfg.RateLimiter = limiter
	}
	client, err := ironcore.New(cfg, namespace)
	if err != nil {
		return nil, err
	}
	if err := client.RegisterInformers(ctx); err != nil {
		return nil, err
	}
	go func() { _ = client.Start(ctx) }()
	if !client.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the IronCore cache did not sync")
	}
	return client, nil
}
