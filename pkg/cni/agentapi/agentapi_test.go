package agentapi

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// serve starts Serve on a fresh socket with h and returns its path; the
// server stops when the test ends, and Serve must have returned nil.
func serve(t *testing.T, h Handler) string {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	dir, err := os.MkdirTemp("", "agentapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "sub", "cni.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(l, h) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return path
}

func TestCallDeliversTheRequestAndTheConfirmation(t *testing.T) {
	got := make(chan Request, 1)
	path := serve(t, HandlerFunc(func(_ context.Context, r Request) error {
		got <- r
		return nil
	}))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("socket mode %v, want 0600: only root may ask for a capture", perm)
	}
	req := Request{Command: CommandAdd, PodNamespace: "ns", PodName: "p", PodUID: "u1",
		Netns: "/var/run/netns/x", ContainerID: "c1", IfName: "eth0",
		PodIPs: []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}}
	if err := Call(context.Background(), path, req); err != nil {
		t.Fatalf("Call: %v", err)
	}
	if r := <-got; !reflect.DeepEqual(r, req) {
		t.Errorf("agent got %+v, want %+v", r, req)
	}
}

func TestCallReportsARefusalWithItsReason(t *testing.T) {
	path := serve(t, HandlerFunc(func(context.Context, Request) error {
		return errors.New("netns gone")
	}))
	err := Call(context.Background(), path, Request{Command: CommandAdd, PodNamespace: "ns", PodName: "p", Netns: "/x"})
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Reason != "netns gone" {
		t.Fatalf("Call = %v, want a RefusedError with the handler's reason", err)
	}
}

func TestServeRefusesInvalidRequestsWithoutCallingTheHandler(t *testing.T) {
	path := serve(t, HandlerFunc(func(context.Context, Request) error {
		t.Error("handler called for an invalid request")
		return nil
	}))
	for _, req := range []Request{
		{Command: "GC", PodNamespace: "ns", PodName: "p", Netns: "/x"},
		{Command: CommandAdd, PodName: "p", Netns: "/x"},
		{Command: CommandAdd, PodNamespace: "ns", PodName: "p"},
		{Command: CommandCheck, PodNamespace: "ns", PodName: "p"},
	} {
		var refused *RefusedError
		if err := Call(context.Background(), path, req); !errors.As(err, &refused) {
			t.Errorf("Call(%+v) = %v, want a refusal", req, err)
		}
	}
}

func TestCallToNoAgentIsUnreachable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	err := Call(context.Background(), path, Request{Command: CommandDel, PodNamespace: "ns", PodName: "p"})
	var unreachable *UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Path != path {
		t.Fatalf("Call = %v, want UnreachableError for %s", err, path)
	}
}

func TestCallGivesUpOnASlowAgentAndTheHandlerIsCancelled(t *testing.T) {
	cancelled := make(chan struct{})
	path := serve(t, HandlerFunc(func(ctx context.Context, _ Request) error {
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := Call(ctx, path, Request{Command: CommandAdd, PodNamespace: "ns", PodName: "p", Netns: "/x"})
	var unreachable *UnreachableError
	var refused *RefusedError
	if err == nil || errors.As(err, &unreachable) || errors.As(err, &refused) {
		t.Fatalf("Call = %v, want a timeout", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled after the client gave up")
	}
}

func TestListenReplacesAStaleSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "agentapi")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "cni.sock")
	// A socket file whose listener died without removing it.
	old, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
}
