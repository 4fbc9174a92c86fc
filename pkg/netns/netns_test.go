//go:build linux

package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/netnstest"
)

// lockedCurrent returns the namespace of the calling goroutine's thread,
// pinned so the answer holds until unlock is called.
func lockedCurrent(t *testing.T) (ID, func()) {
	t.Helper()
	runtime.LockOSThread()
	id, err := Current()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	return id, runtime.UnlockOSThread
}

func TestDoEntersAndReturns(t *testing.T) {
	a, b := netnstest.Pair(t)
	orig, unlock := lockedCurrent(t)
	defer unlock()

	cases := []struct {
		name    string
		path    string
		fnErr   error
		wantErr bool
		wantIn  bool // fn ran, inside the namespace
	}{
		{name: "ip netns path", path: a.Path, wantIn: true},
		{name: "fn's error comes back", path: b.Path, fnErr: errors.New("boom"), wantErr: true, wantIn: true},
		{name: "no such namespace", path: "/var/run/netns/meshpilot-absent", wantErr: true},
		{name: "not a namespace", path: "/dev/null", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			err := Do(tc.path, func() error {
				ran = true
				want, err := IDOf(tc.path)
				if err != nil {
					return err
				}
				if got, err := Current(); err != nil || got != want {
					t.Errorf("inside: namespace %v (%v), want %v", got, err, want)
				}
				if got, _ := Current(); got == orig {
					t.Errorf("inside: still in the original namespace")
				}
				return tc.fnErr
			})
			if (err != nil) != tc.wantErr || (tc.fnErr != nil && !errors.Is(err, tc.fnErr)) {
				t.Errorf("Do = %v, wantErr %v", err, tc.wantErr)
			}
			if ran != tc.wantIn {
				t.Errorf("fn ran = %v, want %v", ran, tc.wantIn)
			}
			if got, _ := Current(); got != orig {
				t.Errorf("calling thread is in %v after Do, want %v", got, orig)
			}
		})
	}
}

// After many concurrent entries, every thread of the process is back in
// the original namespace: none was handed back to the scheduler while
// still inside.
func TestNoThreadLeftInside(t *testing.T) {
	a, b := netnstest.Pair(t)
	orig, unlock := lockedCurrent(t)
	unlock()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := a.Path
			if i%2 == 1 {
				path = b.Path
			}
			if err := Do(path, func() error { time.Sleep(time.Millisecond); return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads: %v %v", tasks, err)
	}
	for _, task := range tasks {
		id, err := IDOf(task)
		if errors.Is(err, os.ErrNotExist) {
			continue // a thread that ended meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		if id != orig {
			t.Errorf("thread %s is in namespace %v, not the original %v", task, id, orig)
		}
	}
}

// A listener opened in one namespace is reached over the veth from the
// other, and not from the namespace the test runs in.
func TestListenAndDialAcrossVeth(t *testing.T) {
	a, b := netnstest.Pair(t)
	l, err := Listen(a.Path, netip.AddrPortFrom(a.IP, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := netip.MustParseAddrPort(l.Addr().String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				got, _ := io.ReadAll(c)
				c.Write(append([]byte("from a: "), got...))
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, b.Path, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := netip.MustParseAddrPort(c.LocalAddr().String()).Addr(); got != b.IP {
		t.Errorf("dialled from %v, want b's address %v", got, b.IP)
	}
	c.Write([]byte("hi"))
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "from a: hi" {
		t.Errorf("got %q, %v", got, err)
	}

	// From the test's own namespace the address does not exist.
	d := net.Dialer{Timeout: 300 * time.Millisecond}
	if c, err := d.Dial("tcp", addr.String()); err == nil {
		c.Close()
		t.Errorf("the namespaced listener is reachable from the root namespace")
	}
	// And a listener for an address the namespace lacks fails.
	if l, err := Listen(a.Path, netip.AddrPortFrom(b.IP, 0), nil); err == nil {
		l.Close()
		t.Errorf("listened on b's address inside a")
	}
}

// The same after switches that fail at each step: a path that does not
// exist (nothing to open), one that is no namespace (setns refuses it),
// and work that fails inside. Each failure must leave its thread where it
// started; the successful switches run meanwhile on the same scheduler
// threads, so a thread handed back in the wrong namespace would show.
func TestNoThreadLeftInsideAfterFailures(t *testing.T) {
	a, b := netnstest.Pair(t)
	orig, unlock := lockedCurrent(t)
	unlock()
	paths := []string{a.Path, b.Path, "/var/run/netns/meshpilot-absent", "/dev/null", a.Path}
	boom := errors.New("boom")
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := paths[i%len(paths)]
			failInside := i%len(paths) == len(paths)-1
			err := Do(path, func() error {
				if failInside {
					return boom
				}
				return nil
			})
			switch {
			case path == a.Path && failInside:
				if !errors.Is(err, boom) {
					t.Errorf("Do(%s) = %v, want fn's error", path, err)
				}
			case path == a.Path || path == b.Path:
				if err != nil {
					t.Errorf("Do(%s): %v", path, err)
				}
			default:
				if err == nil {
					t.Errorf("Do(%s) succeeded", path)
				}
			}
			if errors.Is(err, ErrNotRestored) {
				t.Errorf("a thread could not return: %v", err)
			}
		}()
	}
	wg.Wait()
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads: %v %v", tasks, err)
	}
	for _, task := range tasks {
		id, err := IDOf(task)
		if errors.Is(err, os.ErrNotExist) {
			continue // a thread that ended meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		if id != orig {
			t.Errorf("thread %s is in namespace %v, not the original %v", task, id, orig)
		}
	}
	// And the thread-self view, from goroutines the scheduler places on
	// whichever threads it has: every one of them is home.
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if id, err := Current(); err != nil || id != orig {
				t.Errorf("a goroutine runs in namespace %v (%v), not the original %v", id, err, orig)
			}
		}()
	}
	wg.Wait()
}
