package nodeproxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/meshpilot/meshpilot/pkg/capture"
)

// flakyCapture is a capture backend that records its calls and fails the
// first removes it is told to fail.
type flakyCapture struct {
	mu          sync.Mutex
	failRemoves int
	removed     []string
}

func (*flakyCapture) Name() string                        { return "flaky" }
func (*flakyCapture) Install(string, capture.Ports) error { return nil }
func (*flakyCapture) Installed(string) (bool, error)      { return true, nil }
func (f *flakyCapture) Remove(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRemoves > 0 {
		f.failRemoves--
		return errors.New("netlink: transient failure")
	}
	f.removed = append(f.removed, path)
	return nil
}

// syncWatch is a membership watch over fixed Pods and Namespaces, without
// informers, for a proxy whose capture is backend.
func syncWatch(t *testing.T, backend capture.Backend, pod *corev1.Pod, ns *corev1.Namespace) (*membershipWatch, *Proxy) {
	t.Helper()
	kube := fake.NewSimpleClientset(pod, ns)
	p, err := New(Options{Node: "node-1", Conn: noConn{}, Kube: kube, CNISocket: "unused", Capture: backend,
		PodNetns: func(string, string) (string, error) { return "", io.EOF },
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	namespaces := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = pods.Add(pod)
	_ = namespaces.Add(ns)
	return &membershipWatch{p: p, pods: corelisters.NewPodLister(pods), namespaces: corelisters.NewNamespaceLister(namespaces), scan: newAddressScan(p)}, p
}

// TestLeaveRetriesAFailedRemoval: a running pod labelled out of the mesh
// whose rules could not be removed the first time must have them removed
// on the retry. Its record must not be forgotten before the rules are gone,
// or the retry finds nothing captured and leaves the pod's traffic sent to
// listeners that were closed.
func TestLeaveRetriesAFailedRemoval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "a", UID: "uid-a",
			Labels: map[string]string{"istio.io/dataplane-mode": "none"}},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}}},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app",
		Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	backend := &flakyCapture{failRemoves: 1}
	w, p := syncWatch(t, backend, pod, ns)
	p.agent.captured["app/a"] = &capturedPod{w: podWorkload(pod, nil, "cluster.local"), netns: path}

	ctx := context.Background()
	if err := w.sync(ctx, "app/a"); err == nil {
		t.Fatal("first sync: want the removal's error, to be retried")
	}
	if err := w.sync(ctx, "app/a"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if len(backend.removed) != 1 || backend.removed[0] != path {
		t.Fatalf("after the retry the rules removed from %v, want [%s]: the pod stays captured with no listeners", backend.removed, path)
	}
}

// TestLeaveClearsAnOrphanedAnnotation: a pod that an earlier agent
// annotated, whose capture this agent's restart did not find, and that has
// since left the mesh, loses the annotation: WDS would otherwise keep
// sending it with HBONE, to listeners nobody opened.
func TestLeaveClearsAnOrphanedAnnotation(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "a", UID: "uid-a",
			Labels:      map[string]string{"istio.io/dataplane-mode": "none"},
			Annotations: map[string]string{RedirectionAnnotation: "enabled"}},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}}},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}
	w, p := syncWatch(t, &flakyCapture{}, pod, ns)
	ctx := context.Background()
	if err := w.sync(ctx, "app/a"); err != nil {
		t.Fatal(err)
	}
	got, err := p.opts.Kube.CoreV1().Pods("app").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Annotations[RedirectionAnnotation]; ok {
		t.Errorf("%s=%q is still on a pod out of the mesh with no capture", RedirectionAnnotation, v)
	}
}
