//go:build linux

package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// threadSelf names the calling thread's own namespace. /proc/self would name
// the main thread's, which is not necessarily the one we are running on.
const threadSelf = "/proc/thread-self/ns/net"

// ErrNotRestored wraps a failure to return a thread to its namespace. The
// work ran, but the thread was retired.
var ErrNotRestored = errors.New("netns: thread could not return to its namespace and was retired")

// Do runs fn with its OS thread in the network namespace at path (for
// example /var/run/netns/pod-a or /proc/1234/ns/net) and returns fn's error.
//
// fn runs on its own goroutine: goroutines it starts run elsewhere, in the
// process's namespace, and a name it resolves may be looked up on another
// thread; create sockets directly in fn, from IP literals.
func Do(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer target.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Locked from here on. Unlocking is the last step, and only once
		// the thread is back where it started.
		orig, err := os.Open(threadSelf)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			// setns failed, so the thread never left.
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: enter %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Still locked: this goroutine ends without unlocking and the
			// runtime kills the thread.
			errc <- errors.Join(ferr, fmt.Errorf("%w: %v", ErrNotRestored, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Listen opens a TCP listener on addr inside the namespace at path. lc may
// set socket options (a Control function for IP_TRANSPARENT, say); nil uses
// the defaults.
func Listen(path string, addr netip.AddrPort, lc *net.ListenConfig) (net.Listener, error) {
	if lc == nil {
		lc = &net.ListenConfig{}
	}
	var l net.Listener
	err := Do(path, func() error {
		var err error
		// An IP literal: nothing to resolve on another thread.
		l, err = lc.Listen(context.Background(), "tcp", addr.String())
		return err
	})
	if err != nil && l != nil {
		l.Close()
		return nil, err
	}
	return l, err
}

// Dial opens a TCP connection to addr from inside the namespace at path,
// as a node proxy does when it reaches a pod from the pod's own network.
func Dial(ctx context.Context, path string, addr netip.AddrPort, d *net.Dialer) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	var c net.Conn
	err := Do(path, func() error {
		var err error
		// The socket is created on this thread, so it lives in the
		// namespace; the connect may then complete from any thread.
		c, err = d.DialContext(ctx, "tcp", addr.String())
		return err
	})
	if err != nil && c != nil {
		c.Close()
		return nil, err
	}
	return c, err
}

// ID identifies a network namespace: two paths name the same namespace
// exactly when their IDs are equal.
type ID struct{ Dev, Ino uint64 }

// IDOf returns the ID of the namespace at path.
func IDOf(path string) (ID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ID{}, fmt.Errorf("netns: %w", err)
	}
	return ID{Dev: st.Dev, Ino: st.Ino}, nil
}

// Current returns the ID of the calling thread's namespace. It means what
// it says only while the caller holds runtime.LockOSThread.
func Current() (ID, error) { return IDOf(threadSelf) }
