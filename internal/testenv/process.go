package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/ironcore-dev/ironcore-cloud-controller-manager/internal/testenv/apiproxy"
)

// Process is a program the stack started, with its output in a log file.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	log     *os.File
	exited  chan struct{}
	err     error
}

// StartProcess starts binary with args, logging to <dir>/<name>.log.
func StartProcess(dir, name, binary string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a signal to the test does not reach it before Stop does.
	// (Not Pdeathsig: it fires when the OS thread that started the child exits, which in Go can
	// happen while the test still runs.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	return p, nil
}

// Err is how the process ended, once Exited is closed.
func (p *Process) Err() error { return p.err }

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Kill ends the process at once (SIGKILL), as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Pause stops the process (SIGSTOP) until Resume, as a machine that freezes or a process
// descheduled for a long time would: it keeps its connections and state, and does nothing.
func (p *Process) Pause() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (p *Process) Resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// Stop asks the process to end (SIGTERM), kills it if it has not after ten seconds, and waits.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.Resume() // a paused process handles SIGTERM only once it runs
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.Kill()
	}
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) {
		return fmt.Errorf("%s: %w", p.Name, p.err)
	}
	return nil
}

// PauseAtWrite pauses the process (Pause) as the first of its writes that match accepts
// arrives at one of the proxies, before the proxy forwards it: the process stops in the middle
// of a write, waiting for the answer, as a machine that freezes mid-request would. It returns
// that write, or an error if none came within timeout, in which case the process runs on.
func (p *Process) PauseAtWrite(timeout time.Duration, match func(apiproxy.Write) bool, proxies ...*apiproxy.Proxy) (apiproxy.Write, error) {
	type paused struct {
		write apiproxy.Write
		err   error
	}
	var (
		mu      sync.Mutex
		done    bool
		outcome = make(chan paused, 1)
	)
	see := func(write apiproxy.Write) bool {
		if !match(write) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if !done {
			done = true
			outcome <- paused{write: write, err: p.Pause()}
		}
		return true
	}
	for _, proxy := range proxies {
		defer proxy.OnWrite(see)()
	}
	select {
	case o := <-outcome:
		return o.write, o.err
	case <-time.After(timeout):
	}
	mu.Lock()
	defer mu.Unlock()
	if done { // paused just now
		o := <-outcome
		return o.write, o.err
	}
	done = true
	return apiproxy.Write{}, fmt.Errorf("%s made no write to pause it at within %s", p.Name, timeout)
}
