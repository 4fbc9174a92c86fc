package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/testlog"
)

// restartTimeout bounds each step of a restart on a loaded machine.
const restartTimeout = 60 * time.Second

// stopGrace is how long a stopped process may take to exit before it is
// killed, as the kubelet kills a static pod after its grace period.
// kube-apiserver on SIGTERM drains watches for as long as its request
// timeout (60 s), which would make every restart test a minute longer and
// prove nothing more: clients see the same outage either way.
const stopGrace = 5 * time.Second

// Restart stops kube-apiserver, then etcd, as a control-plane node's reboot
// would (SIGTERM), runs whileDown, and starts both again with their former
// command lines: the same data directory, ports and certificates, so that
// every object survives and every client's config still works. It returns
// once the API server is ready again. The restarted processes are stopped
// when the test ends.
//
// envtest cannot do this itself: starting its processes again makes new
// certificates, and stopping them deletes the data directory.
func (e *Env) Restart(t testing.TB, whileDown func()) {
	t.Helper()
	apiserver, err := findProcess("kube-apiserver", "--cert-dir="+e.certDir)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := findProcess("etcd", "--data-dir="+e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*process{apiserver, etcd} {
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
	}
	if whileDown != nil {
		whileDown()
	}
	for _, p := range []*process{etcd, apiserver} {
		logs := &testlog.Buffer{}
		cmd := exec.Command(p.argv[0], p.argv[1:]...)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("restart %s: %v", p.name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			// Cleanups run last-registered first, so these processes stop
			// before what the test started ahead of the restart (its control
			// plane, say), whose watches the API server would drain for a
			// minute (see stopGrace).
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(stopGrace):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("restarted %s log:\n%s", p.name, logs.String())
			}
		})
		if p.name == "etcd" {
			continue // the API server waits for etcd itself
		}
		if err := e.waitReady(done); err != nil {
			t.Fatalf("restarted kube-apiserver: %v\n%s", err, logs.String())
		}
	}
}

// waitReady polls the API server's /readyz until it answers ok.
func (e *Env) waitReady(exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
	defer cancel()
	for {
		var code int
		res := e.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code)
		if res.Error() == nil && code == http.StatusOK {
			return nil
		}
		select {
		case <-exited:
			return errors.New("exited")
		case <-ctx.Done():
			return fmt.Errorf("not ready within %v: %v", restartTimeout, res.Error())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// process is a running program found in /proc.
type process struct {
	name string
	pid  int
	argv []string
}

// findProcess finds the one program called name whose arguments include
// arg.
func findProcess(name, arg string) (*process, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []*process
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		if filepath.Base(argv[0]) == name && slices.Contains(argv[1:], arg) {
			found = append(found, &process{name: name, pid: pid, argv: argv})
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("kubetest: %d %s processes with %s, want 1", len(found), name, arg)
	}
	return found[0], nil
}

// stop sends SIGTERM, then SIGKILL if the process lingers, and waits until
// it is gone (its parent, envtest, reaps it).
func (p *process) stop() error {
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	deadline := time.Now().Add(stopGrace)
	for {
		if !p.alive() {
			return nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			deadline = time.Now().Add(restartTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether the process still runs (a zombie does not).
func (p *process) alive() bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
