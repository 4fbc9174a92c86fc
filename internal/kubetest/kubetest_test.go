package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStartServesDestinationRules(t *testing.T) {
	env := Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "Kubetest-")
	if !strings.HasPrefix(ns, "kubetest-") || len(ns) <= len("kubetest-") {
		t.Fatalf("namespace %q lacks the generated suffix", ns)
	}
	other := env.Namespace(t, "kubetest")
	if other == ns {
		t.Fatalf("two calls returned the same namespace %q", ns)
	}
	if _, err := env.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace not created: %v", err)
	}
	list, err := env.Istio.NetworkingV1().DestinationRules(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("DestinationRule CRD not installed: %v", err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("fresh namespace holds %d DestinationRules", len(list.Items))
	}
}

func TestRepoRootHoldsGoMod(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "module github.com/meshpilot/meshpilot\n") {
		t.Fatalf("%s/go.mod is not meshpilot's", root)
	}
}

// stopRecorder stands in for a test so that Start's failure or skip can be
// observed instead of ending this test.
type stopRecorder struct {
	testing.TB
	fatal, skip string
}

func (r *stopRecorder) Helper() {}

func (r *stopRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *stopRecorder) Skip(args ...any) {
	r.skip = fmt.Sprint(args...)
	runtime.Goexit()
}

// runStart calls start as a test body would, on its own goroutine, because
// a failed or skipped start ends the goroutine.
func runStart(t *testing.T, short bool) *stopRecorder {
	rec := &stopRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start(rec, short, nil)
		t.Error("start returned instead of failing or skipping")
	}()
	<-done
	return rec
}

func TestStartFailsWithoutAssets(t *testing.T) {
	t.Setenv(assetsEnv, "")
	rec := runStart(t, false)
	if !strings.Contains(rec.fatal, "make envtest-assets") {
		t.Fatalf("failure message %q does not say to run make envtest-assets", rec.fatal)
	}
}

// make test-unit runs with -short and without an API server: every test
// that starts one must skip there, saying why, rather than fail.
func TestStartSkipsUnderShort(t *testing.T) {
	t.Setenv(assetsEnv, "")
	rec := runStart(t, true)
	if rec.fatal != "" {
		t.Fatalf("start failed under -short: %s", rec.fatal)
	}
	if !strings.Contains(rec.skip, "-short") || !strings.Contains(rec.skip, "API server") {
		t.Fatalf("skip reason %q does not say it needs an API server and -short excludes it", rec.skip)
	}
}

// Objects survive a restart, the same client works before and after, and
// the API server answers again when Restart returns.
func TestRestartKeepsObjectsAndClients(t *testing.T) {
	env := Start(t)
	ns := env.Namespace(t, "restart")
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns}, Data: map[string]string{"k": "v"}}
	if _, err := env.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var downErr error
	env.Restart(t, func() {
		_, downErr = env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
	})
	if downErr == nil {
		t.Error("the API server answered while it was down")
	}
	got, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Fatalf("after the restart the ConfigMap holds %v", got.Data)
	}
}
