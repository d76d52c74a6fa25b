package testenv

import (
	"context"
	"os"
	"os/exec"
)

// Every program this repository builds to run (the CCM, the lab and the servers of the stack)
// is built with one set of flags, the release's too (make release), and the Makefile's
// SHARED_BUILD says the same. Go's build cache keys each compiled package by its flags, and cgo
// and -trimpath change every package's key: with one set, a first run compiles the Kubernetes
// and IronCore packages the CCM and the servers share once instead of twice.
const sharedBuildEnv = "CGO_ENABLED=0"

// sharedBuildFlags: paths in the binaries are module paths, not this machine's, and no symbol
// table or DWARF, which makes linking faster.
func sharedBuildFlags() []string { return []string{"-trimpath", "-ldflags=-s -w"} }

// sharedBuild is the go build of packages (flags of its own may lead them) into out, run in
// dir, with the shared flags.
func sharedBuild(ctx context.Context, dir, out string, packages ...string) *exec.Cmd {
	args := append(append([]string{"build"}, sharedBuildFlags()...), "-o", out)
	cmd := exec.CommandContext(ctx, "go", append(args, packages...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), sharedBuildEnv)
	return cmd
}
