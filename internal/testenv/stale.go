package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A stack's directory records who runs it (owner) and the processes it started (pids), each
// with its start time, so a later run can tell a stack that is still running from one whose
// owner was killed mid-way and left servers behind, and stop only those.
const (
	stackDirPattern = "ironcore-ccm-stack-*"
	ownerFile       = "owner"
	pidsFile        = "pids"
	// tempDirsFile lists the temporary directories outside the stack's own that envtest made
	// for it and no server's command line names.
	tempDirsFile = "tempdirs"
)

// proc is a process as /proc shows it: its start time (in clock ticks since boot) tells it
// from a later process that got the same ID.
type proc struct {
	pid       int
	startTime uint64
}

// readProc reads a process's parent and start time from /proc/<pid>/stat.
func readProc(pid int) (ppid int, startTime uint64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The fields after the command name, which is in parentheses and may contain anything.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ppid, err1 := strconv.Atoi(fields[1])
	startTime, err2 := strconv.ParseUint(fields[19], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return ppid, startTime, nil
}

// alive reports whether p still runs (and is the same process): an ended process waiting
// to be reaped (a zombie) does not.
func (p proc) alive() bool {
	_, startTime, err := readProc(p.pid)
	if err != nil || startTime != p.startTime {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	state := strings.Fields(string(stat[i+1:]))
	return len(state) > 0 && state[0] != "Z" && state[0] != "X"
}

func (p proc) String() string { return fmt.Sprintf("%d %d", p.pid, p.startTime) }

func parseProc(line string) (proc, bool) {
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return proc{}, false
	}
	pid, err1 := strconv.Atoi(fields[0])
	startTime, err2 := strconv.ParseUint(fields[1], 10, 64)
	return proc{pid: pid, startTime: startTime}, err1 == nil && err2 == nil
}

// writeOwner records this process as the owner of the stack in dir, with its purpose.
func writeOwner(dir, purpose string) error {
	_, startTime, err := readProc(os.Getpid())
	if err != nil {
		return err
	}
	me := proc{pid: os.Getpid(), startTime: startTime}
	return os.WriteFile(filepath.Join(dir, ownerFile), []byte(me.String()+"\n"+purpose+"\n"), 0o644)
}

// recordChildren adds this process's children to the stack's pids file. The servers envtest
// starts are only found this way.
func recordChildren(dir string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	recorded := map[string]bool{}
	if data, err := os.ReadFile(filepath.Join(dir, pidsFile)); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			recorded[line] = true
		}
	}
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		ppid, startTime, err := readProc(pid)
		if err != nil || ppid != os.Getpid() {
			continue
		}
		if p := (proc{pid: pid, startTime: startTime}); !recorded[p.String()] {
			appendPid(dir, p)
		}
	}
	return nil
}

// recordChildrenUntil records this process's children every quarter second until done is
// closed, and once more then.
func recordChildrenUntil(dir string, done <-chan struct{}) {
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for {
		_ = recordChildren(dir)
		select {
		case <-done:
			_ = recordChildren(dir)
			return
		case <-ticker.C:
		}
	}
}

// recordTempDirs adds directories to the stack's list of temporary directories outside its
// own, for a later run to remove should this one be killed; like appendPid, best effort.
func recordTempDirs(dir string, tempDirs ...string) {
	f, err := os.OpenFile(filepath.Join(dir, tempDirsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	for _, tempDir := range tempDirs {
		if tempDir != "" && !strings.ContainsAny(tempDir, " \n") {
			_, _ = f.WriteString(tempDir + "\n")
		}
	}
}

// appendPid adds p to the stack's pids file; the record helps a later run, so a failure to
// write it stops nothing.
func appendPid(dir string, p proc) {
	f, err := os.OpenFile(filepath.Join(dir, pidsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(p.String() + "\n")
}

// staleStack is the directory of another run's stack.
type staleStack struct {
	dir     string
	owner   proc
	purpose string
	// ownerAlive tells a running stack from one whose owner was killed.
	ownerAlive bool
}

// otherStacks lists the stack directories in tmp other than own.
func otherStacks(tmp, own string) []staleStack {
	dirs, _ := filepath.Glob(filepath.Join(tmp, stackDirPattern))
	var stacks []staleStack
	for _, dir := range dirs {
		if dir == own {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not yet written, or from a version that did not write it
		}
		lines := strings.SplitN(string(data), "\n", 3)
		owner, ok := parseProc(lines[0])
		if !ok {
			continue
		}
		purpose := ""
		if len(lines) > 1 {
			purpose = strings.TrimSpace(lines[1])
		}
		stacks = append(stacks, staleStack{dir: dir, owner: owner, purpose: purpose, ownerAlive: owner.alive()})
	}
	return stacks
}

// cleanUp stops the processes a killed run left behind (those it recorded, and those whose
// command line names its directory) and removes its directory; it returns how many processes
// it stopped.
func (s staleStack) cleanUp() (int, error) {
	left := map[int]proc{}
	if data, err := os.ReadFile(filepath.Join(s.dir, pidsFile)); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if p, ok := parseProc(line); ok {
				left[p.pid] = p
			}
		}
	}
	for _, p := range processesNaming(s.dir + "/") {
		left[p.pid] = p
	}
	stopped := 0
	var dirs []string
	for _, p := range left {
		if !p.alive() {
			continue
		}
		dirs = append(dirs, envtestDirsOf(p.pid)...)
		// Each server runs in its own process group; the whole group goes.
		if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		stopped++
	}
	if data, err := os.ReadFile(filepath.Join(s.dir, tempDirsFile)); err == nil {
		dirs = append(dirs, strings.Fields(string(data))...)
	}
	var errs []error
	for _, dir := range append(dirs, s.dir) {
		errs = append(errs, os.RemoveAll(dir))
	}
	return stopped, errors.Join(errs...)
}

// envtestTempPrefixes start the names of the temporary directories envtest and IronCore's
// envtest extensions make for their servers' data, certificates and kubeconfigs.
var envtestTempPrefixes = []string{"k8s_test_framework_", "envtest-", "apiserver", "process"}

// envtestDirsOf lists the envtest temporary directories a process's command line names.
func envtestDirsOf(pid int) []string {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil
	}
	tmp := filepath.Clean(os.TempDir()) + "/"
	var dirs []string
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		for rest := arg; ; {
			i := strings.Index(rest, tmp)
			if i < 0 {
				break
			}
			rest = rest[i+len(tmp):]
			name, _, _ := strings.Cut(rest, "/")
			for _, prefix := range envtestTempPrefixes {
				if strings.HasPrefix(name, prefix) && !strings.ContainsAny(name, ",= ") {
					dirs = append(dirs, tmp+name)
				}
			}
		}
	}
	return dirs
}

// processesNaming lists the processes whose command line contains path.
func processesNaming(path string) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var found []proc
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), path) {
			continue
		}
		if _, startTime, err := readProc(pid); err == nil {
			found = append(found, proc{pid: pid, startTime: startTime})
		}
	}
	return found
}

// ErrAnotherRun is returned by Start when a demo, lab or benchmark stack of another run is
// still running and Options.Alone asks not to run beside it.
var ErrAnotherRun = errors.New("another run is still using the stack")

// checkOtherRuns cleans up after runs killed mid-way and, if alone is set, refuses to start
// beside a demo, lab or benchmark that still runs (tests run several stacks at once).
func checkOtherRuns(tmp, own string, alone bool, out io.Writer) error {
	for _, other := range otherStacks(tmp, own) {
		if other.ownerAlive {
			if alone && other.purpose != "" {
				return fmt.Errorf("%w: a %s is still running (pid %d, its files in %s); stop it (Ctrl-C in its terminal, or kill %d) and run again",
					ErrAnotherRun, other.purpose, other.owner.pid, other.dir, other.owner.pid)
			}
			continue
		}
		stopped, err := other.cleanUp()
		if err != nil {
			return fmt.Errorf("clean up after a run that was killed mid-way (%s): %w", other.dir, err)
		}
		what := "a run"
		if other.purpose != "" {
			what = "a " + other.purpose
		}
		fmt.Fprintf(out, "cleaned up after %s that was killed mid-way: stopped %d of its processes, removed %s\n", what, stopped, other.dir)
	}
	return nil
}
