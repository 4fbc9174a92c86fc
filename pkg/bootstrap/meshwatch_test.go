package bootstrap

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/configmapdir"
)

// TestMeshConfigChangesAreLoggedWhileRunning edits the mounted mesh config
// of a running control plane: each changed setting is logged with its old
// and new value and the restart it needs, a setting whose flag was given
// stays quiet, a broken file is refused, and a setting removed from the
// file falls back to its flag's value.
func TestMeshConfigChangesAreLoggedWhileRunning(t *testing.T) {
	cm := configmapdir.New(t, map[string][]byte{"mesh": []byte("rootNamespace: one\ningressClass: a\n")})
	logs := &lockedBuffer{}
	opts := DefaultOptions()
	opts.ConfigDir = t.TempDir()
	opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr, opts.Webhook.Addr = "127.0.0.1:0", "", "", ""
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	explicit := map[string]bool{"ingress-controller-mode": true}
	if err := opts.LoadMeshConfig(filepath.Join(cm.Path(), "mesh"), func(flag string) bool { return explicit[flag] }); err != nil {
		t.Fatal(err)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// The watch reads the file once it is in place; nothing changed yet.
	waitForLog(t, logs, `msg="meshpilot serving"`)

	cm.Update(map[string][]byte{"mesh": []byte("rootNamespace: two\ningressClass: b\ningressControllerMode: DEFAULT\n")})
	waitForLog(t, logs, `setting=rootNamespace old=one new=two reason="the push loop reads it only at start"`)
	waitForLog(t, logs, `setting=ingressClass old=a new=b`)

	cm.Update(map[string][]byte{"mesh": []byte("rootNamespace: [\n")})
	waitForLog(t, logs, `msg="mesh config not reloaded; the settings in use stay"`)

	cm.Update(map[string][]byte{"mesh": []byte("rootNamespace: two\n")})
	waitForLog(t, logs, `setting=ingressClass old=b new=istio`)

	all := logs.String()
	if strings.Contains(all, "setting=ingressControllerMode") {
		t.Errorf("a setting given by flag was reported as changed by the file:\n%s", all)
	}
	if n := strings.Count(all, "setting=rootNamespace"); n != 1 {
		t.Errorf("the rootNamespace change was logged %d times, want once:\n%s", n, all)
	}
	if !strings.Contains(all, `msg="mesh config setting changed; restart meshpilot to apply it"`) {
		t.Errorf("the changes do not say they need a restart:\n%s", all)
	}
}

func waitForLog(t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %s:\n%s", want, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lockedBuffer collects the log lines that the server's goroutines write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
