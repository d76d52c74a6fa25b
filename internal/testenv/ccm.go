package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
)

// CCMBinaryName is the name of the CCM's binary.
const CCMBinaryName = "ironcore-cloud-controller-manager"

// BuildCCM builds the CCM binary from the repository into dir and returns its path.
func BuildCCM(ctx context.Context, dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, CCMBinaryName)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/"+CCMBinaryName)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", CCMBinaryName, err, out)
	}
	return path, nil
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
