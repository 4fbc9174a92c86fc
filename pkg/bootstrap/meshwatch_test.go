package bootstrap

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/configmapdir"
	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// ruleInTwo is a DestinationRule in namespace "two" for a service in
// "app": it applies to proxies of other namespaces only while "two" is the
// root namespace.
const ruleInTwo = `
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: app}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: mesh-wide, namespace: two}
spec:
  host: svc.app.svc.cluster.local
  trafficPolicy: {loadBalancer: {simple: RANDOM}}
`

// TestMeshConfigChangesApplyWhileRunning edits the mounted mesh config of a
// running control plane: each changed setting is logged with its old and
// new value and takes effect without a restart (a new root namespace
// brings its rules to every namespace), a setting whose flag was given
// stays as the flag says, a broken file is refused, and a setting removed
// from the file falls back to its flag's value.
func TestMeshConfigChangesApplyWhileRunning(t *testing.T) {
	cm := configmapdir.New(t, map[string][]byte{"mesh": []byte("rootNamespace: one\ningressClass: a\n")})
	logs := &testlog.Buffer{}
	opts := DefaultOptions()
	opts.ConfigDir = t.TempDir()
	if err := os.WriteFile(filepath.Join(opts.ConfigDir, "world.yaml"), []byte(ruleInTwo), 0o600); err != nil {
		t.Fatal(err)
	}
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
	const host = "svc.app.svc.cluster.local"
	// eventually waits for cond on the served push context.
	eventually := func(what string, cond func(*pushcontext.PushContext) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if pc := srv.xds.PushContext(); pc != nil && cond(pc) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
		}
	}
	eventually("the directory's service is never served", func(pc *pushcontext.PushContext) bool {
		return pc.ServiceForHostname(host) != nil
	})
	if srv.xds.PushContext().DestinationRuleFor("client", host) != nil {
		t.Fatal("a rule of namespace two applies to namespace client before two is the root namespace")
	}

	cm.Update(map[string][]byte{"mesh": []byte("rootNamespace: two\ningressClass: b\ningressControllerMode: DEFAULT\n")})
	waitForLog(t, logs, `setting=rootNamespace old=one new=two`)
	waitForLog(t, logs, `setting=ingressClass old=a new=b`)
	eventually("the new root namespace's rule never applied to namespace client", func(pc *pushcontext.PushContext) bool {
		return pc.DestinationRuleFor("client", host) != nil
	})

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
}

func waitForLog(t *testing.T, logs *testlog.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %s:\n%s", want, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
