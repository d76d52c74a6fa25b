package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startSleeper starts a process carrying owner's mark, as a stack's server would, with args on
// its command line; the test ends it if the code under test does not.
func startSleeper(t *testing.T, owner *proc, args ...string) proc {
	t.Helper()
	// The shell stays (it does not exec sleep), with args on its command line.
	cmd := exec.Command("sh", append([]string{"-c", "sleep 300; :"}, args...)...)
	cmd.Env = os.Environ()
	if owner != nil {
		cmd.Env = append(cmd.Env, ownerEnv+"="+owner.String())
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	stat, err := readProc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel lets the parent go on when the child's new memory is in place, a moment before
	// it records where the environment is: until then /proc/<pid>/environ reads empty, and a
	// loaded machine can get there first.
	err = WaitFor(context.Background(), 10*time.Second, "the sleeper's environment", func(context.Context) error {
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid))
		if err != nil || len(environ) == 0 {
			return fmt.Errorf("environment not readable yet: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return proc{pid: cmd.Process.Pid, startTime: stat.startTime}
}

// deadProcess returns a process that has ended, as the owner of a run that was killed.
func deadProcess(t *testing.T) proc {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stat, err := readProc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return proc{pid: cmd.Process.Pid, startTime: stat.startTime}
}

func writeStackDir(t *testing.T, tmp string, owner proc, purpose string) string {
	t.Helper()
	dir, err := os.MkdirTemp(tmp, stackDirPattern)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner.String()+"\n"+purpose+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestARunKilledMidwayIsCleanedUpByTheNext(t *testing.T) {
	tmp := t.TempDir()
	killed := deadProcess(t)
	stale := writeStackDir(t, tmp, killed, "demo")
	server := startSleeper(t, &killed)
	// A user's command that names the stack's files is not the stack's.
	bystander := startSleeper(t, nil, "--kubeconfig="+filepath.Join(stale, "target-admin.kubeconfig"))
	var out strings.Builder
	if err := checkOtherRuns(tmp, "", true, &out); err != nil {
		t.Fatal(err)
	}
	if server.alive() {
		t.Error("the killed run's server still runs")
	}
	if !bystander.alive() {
		t.Error("a process the killed run did not start was stopped")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the killed run's directory is still there: %v", err)
	}
	// The server's shell, and its sleep if the shell has started it yet: both carry the mark.
	if !strings.Contains(out.String(), "cleaned up after a demo that was killed mid-way: stopped ") {
		t.Errorf("message: %q", out.String())
	}
}

func TestARunningDemoIsLeftAloneAndNamed(t *testing.T) {
	tmp := t.TempDir()
	owner := startSleeper(t, nil)
	server := startSleeper(t, &owner)
	running := writeStackDir(t, tmp, owner, "demo")

	// Tests run beside it.
	if err := checkOtherRuns(tmp, "", false, &strings.Builder{}); err != nil {
		t.Fatalf("a test stack refused to run beside a demo: %v", err)
	}
	if !server.alive() {
		t.Fatal("the running demo's server was stopped")
	}
	if _, err := os.Stat(running); err != nil {
		t.Fatalf("the running demo's directory is gone: %v", err)
	}
	// A demo is not refused because of one that started after it (of two started at once,
	// only the later gives way).
	earlier := proc{pid: owner.pid, startTime: owner.startTime - 1}
	if err := checkOtherRunsAs(earlier, tmp, "", true, &strings.Builder{}); err != nil {
		t.Fatalf("refused because of a later demo: %v", err)
	}
}

func TestASecondDemoIsRefusedWithWhatToDo(t *testing.T) {
	tmp := t.TempDir()
	// This process plays the running demo; a later one asks.
	me, err := self()
	if err != nil {
		t.Fatal(err)
	}
	running := writeStackDir(t, tmp, me, "demo")
	later := proc{pid: me.pid + 1, startTime: me.startTime + 1}
	err = checkOtherRunsAs(later, tmp, "", true, &strings.Builder{})
	if !errors.Is(err, ErrAnotherRun) || !strings.Contains(err.Error(), "a demo is still running") ||
		!strings.Contains(err.Error(), running) {
		t.Fatalf("got %v, want ErrAnotherRun naming the demo and its files", err)
	}
}

func TestAReusedProcessIDIsNotStopped(t *testing.T) {
	tmp := t.TempDir()
	killed := deadProcess(t)
	writeStackDir(t, tmp, killed, "")
	// Marked by another owner that has the same ID but started at another time.
	other := proc{pid: killed.pid, startTime: killed.startTime + 1}
	unrelated := startSleeper(t, &other)
	if err := checkOtherRuns(tmp, "", true, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if !unrelated.alive() {
		t.Error("a process marked by another owner was stopped")
	}
}

func TestTooLittleSpaceIsNamed(t *testing.T) {
	err := checkFreeSpace(t.TempDir(), 1<<62, "the test")
	if err == nil || !strings.Contains(err.Error(), "not enough disk space for the test") {
		t.Fatalf("got %v", err)
	}
	if err := checkFreeSpace(filepath.Join(t.TempDir(), "not", "yet"), 1, "the test"); err != nil {
		t.Fatalf("a directory yet to be made: %v", err)
	}
}
