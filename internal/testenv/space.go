package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Space the first runs need, measured from a fresh clone with empty Go caches: the Go build
// cache holds 3.1 GiB after the first make demo and 8.3 GiB after the first make test (the
// race-enabled and fuzzing test builds); a stack's etcd data and logs stay well under 1 GiB.
const (
	buildSpace = 9 << 30
	stackSpace = 1 << 30
)

// checkBuildSpace fails with what to do if the Go build cache's file system has too little
// room for building the servers.
func checkBuildSpace(out io.Writer) error {
	cache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		fmt.Fprintf(out, "      (could not ask go for GOCACHE to check its free space: %v)\n", err)
		return nil
	}
	return checkFreeSpace(strings.TrimSpace(string(cache)), buildSpace, "the Go build cache (GOCACHE)")
}

// checkFreeSpace fails if the file system of dir (or of its nearest existing parent) has less
// than need bytes free, naming what the space is for.
func checkFreeSpace(dir string, need uint64, what string) error {
	for dir != "" && dir != "/" {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return nil //nolint:nilerr // nothing to say; the writes themselves will fail clearly enough
	}
	free := fs.Bavail * uint64(fs.Bsize)
	if free >= need {
		return nil
	}
	return fmt.Errorf("not enough disk space for %s: %s has %s free, needs about %s; free some space there (or point it elsewhere) and run again",
		what, dir, gib(free), gib(need))
}

func gib(bytes uint64) string { return fmt.Sprintf("%.1f GiB", float64(bytes)/(1<<30)) }
