package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

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

// fatalRecorder stands in for a test so that Start's failure can be
// observed instead of failing this test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartFailsWithoutAssets(t *testing.T) {
	t.Setenv(assetsEnv, "")
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
		t.Error("Start returned without assets")
	}()
	<-done
	if !strings.Contains(rec.msg, "make envtest-assets") {
		t.Fatalf("failure message %q does not say to run make envtest-assets", rec.msg)
	}
}
