package testenv

import (
	"bytes"
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

// A run that starts a stack marks itself, and so every process it starts (they inherit the
// environment: the servers envtest starts, the CCM, builds), with ownerEnv=<pid> <start time>,
// and records the same in its stack directory's owner file, with its purpose. A later run
// tells a stack that still runs from one whose owner was killed mid-way, and stops exactly the
// processes that carry the dead owner's mark.
const (
	stackDirPattern = "ironcore-ccm-stack-*"
	ownerFile       = "owner"
	ownerEnv        = "IRONCORE_CCM_STACK_OWNER"
	// tempDirsFile lists the temporary directories outside the stack's own that envtest made
	// for it and no server's command line names.
	tempDirsFile = "tempdirs"
	// stopWait bounds the wait for a killed process to be gone.
	stopWait = 5 * time.Second
)

// proc is a process as /proc shows it: its start time (in clock ticks since boot) tells it
// from a later process that got the same ID.
type proc struct {
	pid       int
	startTime uint64
}

// procStat is what this file needs of /proc/<pid>/stat.
type procStat struct {
	startTime uint64
	// state is "Z" for a process that ended and waits to be reaped.
	state string
}

func readProc(pid int) (procStat, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The fields after the command name, which is in parentheses and may contain anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	startTime, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return procStat{startTime: startTime, state: fields[0]}, nil
}

// self is this process.
func self() (proc, error) {
	stat, err := readProc(os.Getpid())
	return proc{pid: os.Getpid(), startTime: stat.startTime}, err
}

// alive reports whether p still runs (and is the same process): one that ended and waits to
// be reaped does not.
func (p proc) alive() bool {
	stat, err := readProc(p.pid)
	return err == nil && stat.startTime == p.startTime && stat.state != "Z" && stat.state != "X"
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

// markOwner records this process as the owner of the stack in dir, with its purpose, and
// marks the processes it starts from now on. Best effort: without /proc there is nothing to
// record, and nothing to clean up later either.
func markOwner(dir, purpose string) {
	me, err := self()
	if err != nil {
		return
	}
	_ = os.Setenv(ownerEnv, me.String())
	_ = os.WriteFile(filepath.Join(dir, ownerFile), []byte(me.String()+"\n"+purpose+"\n"), 0o644)
}

// recordTempDirs adds directories to the stack's list of temporary directories outside its
// own, for a later run to remove should this one be killed; best effort, like markOwner.
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

// otherStack is the directory of another run's stack.
type otherStack struct {
	dir     string
	owner   proc
	purpose string
	// ownerAlive tells a running stack from one whose owner was killed.
	ownerAlive bool
}

// otherStacks lists the stack directories in tmp other than own.
func otherStacks(tmp, own string) []otherStack {
	dirs, _ := filepath.Glob(filepath.Join(tmp, stackDirPattern))
	var stacks []otherStack
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
		stacks = append(stacks, otherStack{dir: dir, owner: owner, purpose: purpose, ownerAlive: owner.alive()})
	}
	return stacks
}

// cleanUp stops the processes a killed run left behind, those that carry its owner's mark,
// and removes its directory and the temporary directories of its servers; it returns how many
// processes it stopped.
func (s otherStack) cleanUp() (int, error) {
	left := marked(s.owner)
	dirs := []string{s.dir}
	if data, err := os.ReadFile(filepath.Join(s.dir, tempDirsFile)); err == nil {
		dirs = append(dirs, strings.Fields(string(data))...)
	}
	stopped := 0
	for _, p := range left {
		dirs = append(dirs, envtestDirsOf(p.pid)...)
		if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
			stopped++
		}
	}
	// Removing a directory a server still writes to may fail; wait for them to be gone.
	for deadline := time.Now().Add(stopWait); time.Now().Before(deadline); {
		if !anyAlive(left) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var errs []error
	for _, dir := range dirs {
		errs = append(errs, os.RemoveAll(dir))
	}
	return stopped, errors.Join(errs...)
}

func anyAlive(procs []proc) bool {
	for _, p := range procs {
		if p.alive() {
			return true
		}
	}
	return false
}

// marked lists the running processes that carry owner's mark in their environment.
func marked(owner proc) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	mark := []byte(ownerEnv + "=" + owner.String() + "\x00")
	var found []proc
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, environ...), append([]byte{0}, mark...)) {
			continue
		}
		if stat, err := readProc(pid); err == nil && stat.state != "Z" {
			found = append(found, proc{pid: pid, startTime: stat.startTime})
		}
	}
	return found
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

// ErrAnotherRun is returned by Start when a demo, lab or benchmark stack of another run is
// still running and Options.Purpose asks not to run beside it.
var ErrAnotherRun = errors.New("another run is still using the stack")

// checkOtherRuns cleans up after runs killed mid-way and, if alone is set, refuses to start
// beside a demo, lab or benchmark that runs and started before this one (tests run several
// stacks at once). A cleanup that fails is reported, not fatal: it is not this run's mess.
func checkOtherRuns(tmp, own string, alone bool, out io.Writer) error {
	me, _ := self()
	return checkOtherRunsAs(me, tmp, own, alone, out)
}

// checkOtherRunsAs is checkOtherRuns for a run whose owner is me.
func checkOtherRunsAs(me proc, tmp, own string, alone bool, out io.Writer) error {
	for _, other := range otherStacks(tmp, own) {
		if other.ownerAlive {
			// Of two started at once, the later one (or, started in the same tick, the one
			// with the higher ID) gives way.
			earlier := other.owner.startTime < me.startTime ||
				(other.owner.startTime == me.startTime && other.owner.pid < me.pid)
			if alone && other.purpose != "" && earlier {
				return fmt.Errorf("%w: a %s is still running (pid %d, its files in %s); stop it (Ctrl-C in its terminal, or kill %d) and run again",
					ErrAnotherRun, other.purpose, other.owner.pid, other.dir, other.owner.pid)
			}
			continue
		}
		what := "a run"
		if other.purpose != "" {
			what = "a " + other.purpose
		}
		stopped, err := other.cleanUp()
		if err != nil {
			fmt.Fprintf(out, "could not clean up fully after %s that was killed mid-way (%s): %v\n", what, other.dir, err)
			continue
		}
		fmt.Fprintf(out, "cleaned up after %s that was killed mid-way: stopped %d of its processes, removed %s\n", what, stopped, other.dir)
	}
	return nil
}
