package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	apinetworking "istio.io/api/networking/v1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

const (
	serviceYAML = `apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: ns
  annotations:
    networking.istio.io/exportTo: "."
spec:
  clusterIP: 10.0.0.10
  selector: {app: reviews}
  ports:
  - {name: http, port: 9080, targetPort: 8080}
`
	podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: reviews-v1
  namespace: ns
  labels: {app: reviews, version: v1}
spec:
  serviceAccountName: reviews
  containers: [{name: app, image: x}]
status:
  phase: Running
  podIPs: [{ip: 10.244.1.5}]
`
	sliceYAML = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc
  namespace: ns
  labels: {kubernetes.io/service-name: reviews}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.244.1.5]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: reviews-v1}
  zone: z1
`
	drYAML = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: ns
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
`
	betaDRYAML = `apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata:
  name: ratings
spec:
  host: ratings
  trafficPolicy:
    loadBalancer: {simple: RANDOM}
`
	invalidDRYAML = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: broken
  namespace: ns
spec:
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v1, labels: {version: v2}}
`
	namespaceYAML = `apiVersion: v1
kind: Namespace
metadata:
  name: ns
  labels: {istio-injection: enabled}
`
)

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// Write then rename, so the source never reads a half-written file.
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type fileHarness struct {
	t       testing.TB
	store   model.Store
	metrics *Metrics
	logs    *testlog.Buffer
	source  *FileSource
}

// startFileSource runs a source for dir until the test ends, after each of
// opts has adjusted its options, and waits for its first load.
func startFileSource(t *testing.T, dir string, opts ...func(*FileSourceOptions)) *fileHarness {
	t.Helper()
	h := &fileHarness{t: t, store: model.NewStore(), metrics: NewMetrics(prometheus.NewRegistry()), logs: &testlog.Buffer{}}
	o := FileSourceOptions{
		Dir: dir, Store: h.store, Metrics: h.metrics, Debounce: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(h.logs, nil)),
	}
	for _, opt := range opts {
		opt(&o)
	}
	src, err := NewFileSource(o)
	if err != nil {
		t.Fatal(err)
	}
	h.source = src
	ctx, cancel := context.WithCancel(context.Background())
	runSynced(ctx, cancel, t, src, "first load")
	return h
}

// syncingSource is what the tests run: a file or a Kubernetes source.
type syncingSource interface {
	Run(context.Context) error
	HasSynced() bool
	Synced() <-chan struct{}
}

// runSynced runs src until the test ends, when cancel stops it and its Run
// must return no error, and waits until it reports what (its first sync).
func runSynced(ctx context.Context, cancel context.CancelFunc, t *testing.T, src syncingSource, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-src.Synced():
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	if !src.HasSynced() {
		t.Fatalf("%s: Synced is closed, but HasSynced reports false", what)
	}
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkReported checks that the source counted exactly wantErrors (by
// reason) against kind, and logged each of wantLog.
func (h *fileHarness) checkReported(t *testing.T, kind string, wantErrors map[string]float64, wantLog []string) {
	t.Helper()
	for _, reason := range []string{ReasonInvalid, ReasonDecode, ReasonDuplicate} {
		if got := h.errorCount(kind, reason); got != wantErrors[reason] {
			t.Errorf("errors{kind=%s,reason=%s} = %v, want %v", kind, reason, got, wantErrors[reason])
		}
	}
	for _, want := range wantLog {
		if !strings.Contains(h.logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, h.logs)
		}
	}
}

func (h *fileHarness) errorCount(kind, reason string) float64 {
	return counterValue(h.t, h.metrics.ConfigErrors.WithLabelValues(FileSourceName, kind, reason))
}

func drHosts(store model.Store) []string {
	var out []string
	for _, c := range store.Configs(model.KindDestinationRule) {
		out = append(out, c.Namespace+"/"+c.Name+"="+c.Spec.(*apinetworking.DestinationRule).GetHost())
	}
	return out
}

func TestFileSourceInitialLoad(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "svc.yaml", serviceYAML+"---\n"+namespaceYAML)
	writeFile(t, dir, "nested/deeper/workloads.yml", "---\n# comment\n---\n"+sliceYAML+"---\n"+podYAML)
	writeFile(t, dir, "dr.json", `{"apiVersion":"networking.istio.io/v1","kind":"DestinationRule",`+
		`"metadata":{"name":"json","namespace":"ns"},"spec":{"host":"json.example.com"}}`)
	writeFile(t, dir, "beta.yaml", betaDRYAML)
	writeFile(t, dir, "notes.txt", "not: config")
	writeFile(t, dir, ".hidden/dr.yaml", drYAML)
	h := startFileSource(t, dir)

	svc := h.store.Service(reviews)
	if svc == nil {
		t.Fatal("service not loaded")
	}
	if diff := cmp.Diff(model.ExportTo{"ns"}, svc.ExportTo); diff != "" {
		t.Errorf("exportTo (-want +got)\n%s", diff)
	}
	eps := h.store.Endpoints(reviews)
	if len(eps) != 1 || eps[0].Labels["version"] != "v1" || eps[0].ServiceAccount != "reviews" || eps[0].Locality.Zone != "z1" {
		t.Fatalf("endpoints = %+v", eps)
	}
	if ws := h.store.Workloads(); len(ws) != 1 || ws[0].IPs[0] != "10.244.1.5" {
		t.Fatalf("workloads = %+v", ws)
	}
	if ns := h.store.Namespaces(); len(ns) != 1 || ns[0].Labels["istio-injection"] != "enabled" {
		t.Fatalf("namespaces = %+v", ns)
	}
	// The beta rule had no namespace; the hidden directory is not read.
	if diff := cmp.Diff([]string{"default/ratings=ratings", "ns/json=json.example.com"}, drHosts(h.store)); diff != "" {
		t.Errorf("destination rules (-want +got)\n%s", diff)
	}
	for _, c := range h.store.Configs(model.KindDestinationRule) {
		if c.Revision == "" {
			t.Errorf("%s has no revision", c.Name)
		}
	}
	if got := seriesCount(h.metrics.ConfigErrors); got != 0 {
		t.Errorf("%d error series for valid input: %s", got, h.logs.String())
	}
}

func TestFileSourceBadInputIsSkipped(t *testing.T) {
	dir := t.TempDir()
	// A file that parses drops only the objects that are bad.
	writeFile(t, dir, "mixed.yaml", strings.Join([]string{
		serviceYAML,
		"apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec: {}\n",
		invalidDRYAML,
		"apiVersion: v1\nkind: Service\nmetadata: {name: badspec, namespace: ns}\nspec: {ports: notalist}\n",
		drYAML,
		"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: twolb}\n" +
			"spec: {host: a, trafficPolicy: {loadBalancer: {simple: RANDOM, consistentHash: {useSourceIp: true}}}}\n",
		"apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: typo}\nspec: {host: a, simpel: 1}\n",
	}, "---\n"))
	// Files that do not parse load nothing, their good documents neither.
	writeFile(t, dir, "broken.yaml", podYAML+"---\napiVersion: v1\nkind: Service\nmetadata: {name: [unclosed\n")
	writeFile(t, dir, "noversion.yaml", "kind: Service\nmetadata: {name: noversion}\n")
	writeFile(t, dir, "also-good.yaml", podYAML)
	writeFile(t, dir, "dup.yaml", "# the same rule twice\n"+drYAML)
	h := startFileSource(t, dir)

	if h.store.Service(reviews) == nil || len(h.store.Workloads()) != 1 {
		t.Fatal("valid objects next to broken ones were not loaded")
	}
	if diff := cmp.Diff([]string{"ns/reviews=reviews"}, drHosts(h.store)); diff != "" {
		t.Errorf("destination rules (-want +got)\n%s", diff)
	}
	for _, tc := range []struct {
		kind, reason string
		want         float64
	}{
		{"unknown", ReasonParse, 2},             // broken.yaml, noversion.yaml
		{"Service", ReasonDecode, 1},            // ports not a list
		{"Gateway", ReasonUnknownKind, 1},       // a kind we do not read
		{"DestinationRule", ReasonInvalid, 1},   // fails validation
		{"DestinationRule", ReasonDecode, 2},    // two LB policies in one oneof; an unknown field
		{"DestinationRule", ReasonDuplicate, 1}, // dup.yaml repeats ns/reviews
	} {
		if got := h.errorCount(tc.kind, tc.reason); got != tc.want {
			t.Errorf("errors{kind=%s,reason=%s} = %v, want %v", tc.kind, tc.reason, got, tc.want)
		}
	}
	if got := gaugeValue(t, h.metrics.FilesRejected); got != 2 {
		t.Errorf("files rejected = %v, want 2", got)
	}
	logs := h.logs.String()
	for _, want := range []string{"mixed.yaml", "document=2", "name=broken", "name=gw", "line 52: spec.simpel: unknown field",
		`broken.yaml error="line 16: yaml: did not find expected ',' or ']'" objectsKept=0`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	var problems []string
	for _, p := range h.store.SourceProblems() {
		problems = append(problems, fmt.Sprintf("%s:%d %s %s", filepath.Base(p.File), p.Line, p.Kind, p.Name))
	}
	want := []string{
		"broken.yaml:16  ", "mixed.yaml:14 Gateway gw", "mixed.yaml:19 DestinationRule broken",
		"mixed.yaml:29 Service badspec", "mixed.yaml:34 DestinationRule reviews", "mixed.yaml:44 DestinationRule twolb",
		"mixed.yaml:49 DestinationRule typo", "noversion.yaml:1  ",
	}
	if diff := cmp.Diff(want, problems); diff != "" {
		t.Errorf("problems in the store (-want +got)\n%s", diff)
	}
}

func TestFileSourceFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "svc.yaml", serviceYAML)
	writeFile(t, dir, "dr.yaml", drYAML)
	writeFile(t, dir, "pods/pod.yaml", podYAML)
	writeFile(t, dir, "pods/slice.yaml", sliceYAML)
	h := startFileSource(t, dir)
	var changes []model.ConfigKey
	var mu sync.Mutex
	h.store.OnChange(func(k model.ConfigKey) { mu.Lock(); changes = append(changes, k); mu.Unlock() })

	// Edit: the pod's version label changes; its endpoints follow.
	writeFile(t, dir, "pods/pod.yaml", strings.Replace(podYAML, "version: v1", "version: v2", 1))
	eventually(t, "endpoint labels follow the pod", func() bool {
		eps := h.store.Endpoints(reviews)
		return len(eps) == 1 && eps[0].Labels["version"] == "v2"
	})
	mu.Lock()
	for _, k := range changes {
		if k.Kind == model.KindService || k.Kind == model.KindDestinationRule {
			t.Errorf("unchanged object rewritten: %v", k)
		}
	}
	mu.Unlock()

	// A new file in a new subdirectory.
	writeFile(t, dir, "new/sub/beta.yaml", betaDRYAML)
	eventually(t, "new rule", func() bool { return len(h.store.Configs(model.KindDestinationRule)) == 2 })

	// An edit that makes a rule invalid removes it; fixing it restores it.
	writeFile(t, dir, "dr.yaml", strings.Replace(drYAML, "host: reviews", "host: Not_Valid", 1))
	// The store drops the old version when it refuses the new one, and the
	// refusal is counted just after: wait for both.
	eventually(t, "invalid rule removed and reported", func() bool {
		return cmp.Equal(drHosts(h.store), []string{"default/ratings=ratings"}) &&
			h.errorCount("DestinationRule", ReasonInvalid) > 0
	})
	if got := h.errorCount("DestinationRule", ReasonInvalid); got != 1 {
		t.Errorf("invalid errors = %v, want 1", got)
	}
	writeFile(t, dir, "dr.yaml", strings.Replace(drYAML, "host: reviews", "host: reviews.ns.svc.cluster.local", 1))
	eventually(t, "fixed rule restored", func() bool { return len(h.store.Configs(model.KindDestinationRule)) == 2 })

	// Deleting files deletes their objects.
	if err := os.Remove(filepath.Join(dir, "pods", "slice.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "new")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deletions", func() bool {
		return len(h.store.Endpoints(reviews)) == 0 && len(h.store.Configs(model.KindDestinationRule)) == 1
	})
	if h.store.Service(reviews) == nil || len(h.store.Workloads()) != 1 {
		t.Fatal("objects in untouched files were removed")
	}
}

func TestFileSourceOptions(t *testing.T) {
	if _, err := NewFileSource(FileSourceOptions{Store: model.NewStore()}); err == nil {
		t.Error("no Dir accepted")
	}
	if _, err := NewFileSource(FileSourceOptions{Dir: t.TempDir()}); err == nil {
		t.Error("no Store accepted")
	}
	src, err := NewFileSource(FileSourceOptions{Dir: filepath.Join(t.TempDir(), "missing"), Store: model.NewStore()})
	if err != nil {
		t.Fatal(err)
	}
	if src.Name() != "file" {
		t.Errorf("Name() = %q", src.Name())
	}
	if err := src.Run(context.Background()); err == nil {
		t.Error("Run on a missing directory succeeded")
	}
}

func TestDecodeYAML(t *testing.T) {
	objs, errs := DecodeYAML([]byte(serviceYAML + "---\n" + sliceYAML + "---\n" + drYAML + "---\n" + betaDRYAML +
		"---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"))
	var kinds []string
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			kinds = append(kinds, "Service:"+o.Namespace)
		case *discoveryv1.EndpointSlice:
			kinds = append(kinds, "EndpointSlice:"+o.Namespace)
		case *networkingv1.DestinationRule:
			kinds = append(kinds, "v1.DestinationRule:"+o.Namespace+":"+o.Spec.GetHost())
		case *networkingv1beta1.DestinationRule:
			kinds = append(kinds, "v1beta1.DestinationRule:"+o.Namespace+":"+o.Spec.GetHost())
		default:
			kinds = append(kinds, "unexpected")
		}
	}
	want := []string{"Service:ns", "EndpointSlice:ns", "v1.DestinationRule:ns:reviews", "v1beta1.DestinationRule:default:ratings"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("objects (-want +got)\n%s", diff)
	}
	if len(errs) != 1 {
		t.Fatalf("errors = %v, want one", errs)
	}
	if e, ok := errs[0].(*ObjectError); !ok || e.Reason != ReasonUnknownKind || e.Document != 4 || e.Name != "d" {
		t.Errorf("error = %#v", errs[0])
	}
}

// TestFileSourceConfigMapMount mimics how the kubelet updates a mounted
// ConfigMap: files are symlinks through "..data", which is swapped
// atomically to a new hidden directory.
func TestFileSourceConfigMapMount(t *testing.T) {
	mount := t.TempDir()
	version := func(name, host string) {
		writeFile(t, mount, name+"/dr.yaml", strings.Replace(drYAML, "host: reviews", "host: "+host, 1))
	}
	swapData := func(target string) {
		tmp := filepath.Join(mount, "..data_tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(mount, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "first.example.com")
	swapData("..v1")
	if err := os.Symlink("..data/dr.yaml", filepath.Join(mount, "dr.yaml")); err != nil {
		t.Fatal(err)
	}
	// The source is pointed at a symlink to the mount, as some setups do.
	link := filepath.Join(t.TempDir(), "config")
	if err := os.Symlink(mount, link); err != nil {
		t.Fatal(err)
	}
	h := startFileSource(t, link)
	if diff := cmp.Diff([]string{"ns/reviews=first.example.com"}, drHosts(h.store)); diff != "" {
		t.Fatalf("initial load (-want +got)\n%s", diff)
	}
	version("..v2", "second.example.com")
	swapData("..v2")
	eventually(t, "swapped config", func() bool {
		return cmp.Equal(drHosts(h.store), []string{"ns/reviews=second.example.com"})
	})
}

// TestSharedIngester checks that sources sharing an Ingester resolve each
// other's Pods: here the Pod comes from elsewhere (as from Kubernetes) and
// the slice from a file.
func TestSharedIngester(t *testing.T) {
	store := model.NewStore()
	shared := NewIngester(IngesterOptions{Store: store})
	dir := t.TempDir()
	writeFile(t, dir, "slice.yaml", sliceYAML)
	src, err := NewFileSource(FileSourceOptions{Dir: dir, Ingester: shared, Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runSynced(ctx, cancel, t, src, "load")
	pod := testPod("reviews-v1", map[string]string{"version": "v9"}, "sa")
	pod.Namespace = "ns"
	if err := shared.Upsert(pod); err != nil {
		t.Fatal(err)
	}
	eps := store.Endpoints(reviews)
	if len(eps) != 1 || eps[0].Labels["version"] != "v9" {
		t.Fatalf("endpoints = %+v", eps)
	}
}
