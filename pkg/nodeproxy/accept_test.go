package nodeproxy

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/fdtest"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// A capture listener outlives a shortage of file descriptors: once some
// are free it accepts again, rather than staying open with nobody to
// accept, where the workload's captured connections would hang until the
// node proxy restarted.
func TestCaptureAcceptSurvivesRunningOutOfDescriptors(t *testing.T) {
	var logs lockedBuffer
	p := &Proxy{log: slog.New(slog.NewTextHandler(&logs, nil))}
	lw := &localWorkload{p: p}
	lw.current.Store(&workloadapi.Workload{Namespace: "default", Name: "pod"})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 2)
	stopped := make(chan struct{})
	go func() {
		lw.accept(l, func(c net.Conn) { accepted <- c })
		close(stopped)
	}()

	fdtest.Exhaust(t, func() {
		// The dial takes the last descriptor, so the accept fails.
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(logs.String(), "too many open files") {
			if time.Now().After(deadline) {
				t.Fatal("the accept did not fail")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	select {
	case <-stopped:
		t.Fatalf("the capture stopped accepting:\n%s", logs.String())
	default:
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case a := <-accepted:
		a.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted once descriptors were free")
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
