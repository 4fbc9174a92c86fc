package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// ControlPlane is a control plane the tool can restart, for the reconnect
// phase.
type ControlPlane interface {
	// Restart stops the control plane and starts it again. It returns when
	// the old one was stopped and when the new one was started.
	Restart(ctx context.Context) (stopped, started time.Time, err error)
}

// Process is a control plane the tool runs as a child process, with the
// command line Argv. Its PID feeds a ProcSource.
type Process struct {
	Argv           []string
	Stdout, Stderr io.Writer
	// StopTimeout is how long a SIGTERM may take before SIGKILL; 0 means
	// 15s.
	StopTimeout time.Duration

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts the process.
func (p *Process) Start() error {
	if len(p.Argv) == 0 {
		return errors.New("no control-plane command")
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start control plane %q: %w", p.Argv[0], err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// PID is the running process's PID, or 0.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
	}
	return p.cmd.Process.Pid
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false, nil
	}
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM and waits; after StopTimeout it kills the process.
func (p *Process) Stop() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	timeout := p.StopTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("control plane did not stop within %v of SIGTERM; killed", timeout)
	}
}

// Restart implements ControlPlane.
func (p *Process) Restart(context.Context) (time.Time, time.Time, error) {
	if err := p.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
	}
	stopped := time.Now()
	if err := p.Start(); err != nil {
		return stopped, time.Time{}, err
	}
	return stopped, time.Now(), nil
}
