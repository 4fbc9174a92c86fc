package inject

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshpilot/meshpilot/internal/configmapdir"
)

func TestRunReloadsConfigMapUpdates(t *testing.T) {
	values := DefaultValues()
	withHub := func(hub string) []byte {
		return []byte(strings.Replace(string(values), `"hub": "docker.io/istio"`, `"hub": "`+hub+`"`, 1))
	}
	cm := configmapdir.New(t, map[string][]byte{ConfigFile: DefaultConfig(), ValuesFile: withHub("registry.one")})
	h, err := NewHandler(Options{ConfigDir: cm.Path(), NamespaceLabels: enabledNamespace})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() {
		defer wg.Done()
		runErr = h.Run(ctx)
	}()
	defer func() {
		cancel()
		wg.Wait()
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	}()

	injectedImage := func() string {
		resp := serveReview(t, h, "shop", []byte(simplePod))
		if !resp.Allowed {
			t.Fatalf("denied: %v", resp.Result)
		}
		for _, part := range strings.Split(string(resp.Patch), `"image":"`)[1:] {
			if img, _, ok := strings.Cut(part, `"`); ok && strings.HasSuffix(img, "/proxyv2:1.28.0") {
				return img
			}
		}
		t.Fatalf("no proxy image in patch %s", resp.Patch)
		return ""
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := injectedImage()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("proxy image %q, still not %q", got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	if got := injectedImage(); got != "registry.one/proxyv2:1.28.0" {
		t.Fatalf("initial proxy image %q", got)
	}
	cm.Update(map[string][]byte{ConfigFile: DefaultConfig(), ValuesFile: withHub("registry.two")})
	waitFor("registry.two/proxyv2:1.28.0")

	// A broken update is refused and the last good configuration serves on.
	failuresBefore := testutil.ToFloat64(h.opts.Metrics.Reloads.WithLabelValues("error"))
	cm.Update(map[string][]byte{ConfigFile: []byte("policy: [\n"), ValuesFile: withHub("registry.three")})
	deadline := time.Now().Add(20 * time.Second)
	for testutil.ToFloat64(h.opts.Metrics.Reloads.WithLabelValues("error")) == failuresBefore {
		if time.Now().After(deadline) {
			t.Fatal("the broken update was never loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := injectedImage(); got != "registry.two/proxyv2:1.28.0" {
		t.Fatalf("after a broken update the proxy image is %q, want the previous one", got)
	}

	cm.Update(map[string][]byte{ConfigFile: DefaultConfig(), ValuesFile: withHub("registry.four")})
	waitFor("registry.four/proxyv2:1.28.0")
}
