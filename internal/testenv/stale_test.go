package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// startSleeper starts a process in its own group, as StartProcess starts the servers, and
// returns it as recorded; the test ends it if the code under test does not.
func startSleeper(t *testing.T, args ...string) proc {
	t.Helper()
	// The shell stays (it does not exec sleep), with args on its command line.
	cmd := exec.Command("sh", append([]string{"-c", "sleep 300; :"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	_, startTime, err := readProc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return proc{pid: cmd.Process.Pid, startTime: startTime}
}

// deadProcess returns a process that has ended, as the owner of a run that was killed.
func deadProcess(t *testing.T) proc {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, startTime, err := readProc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return proc{pid: cmd.Process.Pid, startTime: startTime}
}

func writeStackDir(t *testing.T, tmp string, owner proc, purpose string, pids ...proc) string {
	t.Helper()
	dir, err := os.MkdirTemp(tmp, stackDirPattern)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner.String()+"\n"+purpose+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		appendPid(dir, p)
	}
	return dir
}

func TestARunKilledMidwayIsCleanedUpByTheNext(t *testing.T) {
	tmp := t.TempDir()
	recorded := startSleeper(t)
	stale := writeStackDir(t, tmp, deadProcess(t), "demo", recorded)
	// Killed before it could record this one, which names the stack's directory.
	unrecorded := startSleeper(t, "--data-dir="+filepath.Join(stale, "target-etcd"))
	var out strings.Builder
	if err := checkOtherRuns(tmp, "", true, &out); err != nil {
		t.Fatal(err)
	}
	if recorded.alive() || unrecorded.alive() {
		t.Errorf("the killed run's servers still run: recorded %v, unrecorded %v", recorded.alive(), unrecorded.alive())
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the killed run's directory is still there: %v", err)
	}
	if !strings.Contains(out.String(), "cleaned up after a demo that was killed mid-way: stopped 2 of its processes") {
		t.Errorf("message: %q", out.String())
	}
}

func TestARunningDemoIsLeftAloneAndNamed(t *testing.T) {
	tmp := t.TempDir()
	owner := startSleeper(t)
	server := startSleeper(t)
	running := writeStackDir(t, tmp, owner, "demo", server)

	// Tests run beside it.
	if err := checkOtherRuns(tmp, "", false, &strings.Builder{}); err != nil {
		t.Fatalf("a test stack refused to run beside a demo: %v", err)
	}
	// Another demo does not, and says what to do.
	err := checkOtherRuns(tmp, "", true, &strings.Builder{})
	if !errors.Is(err, ErrAnotherRun) || !strings.Contains(err.Error(), "a demo is still running") {
		t.Fatalf("got %v, want ErrAnotherRun naming the demo", err)
	}
	if !server.alive() {
		t.Error("the running demo's server was stopped")
	}
	if _, err := os.Stat(running); err != nil {
		t.Errorf("the running demo's directory is gone: %v", err)
	}
}

func TestAReusedProcessIDIsNotStopped(t *testing.T) {
	tmp := t.TempDir()
	other := startSleeper(t)
	// The killed run recorded a server with this ID that has since ended; the ID now belongs
	// to another process, which started at another time.
	recorded := proc{pid: other.pid, startTime: other.startTime - 1}
	writeStackDir(t, tmp, deadProcess(t), "", recorded)
	if err := checkOtherRuns(tmp, "", true, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if !other.alive() {
		t.Error("a process that only shares a recorded ID was stopped")
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
