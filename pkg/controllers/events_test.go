package controllers

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/meshpilot/meshpilot/internal/testlog"
	"github.com/meshpilot/meshpilot/pkg/model"
)

type problemFixture struct {
	reporter *IngressProblemReporter
	recorder *record.FakeRecorder
	metrics  *IngressStatusMetrics
	logs     *testlog.Buffer
}

func newProblemFixture(t *testing.T, ingresses ...string) *problemFixture {
	t.Helper()
	client := kubefake.NewClientset()
	for _, name := range ingresses {
		_, err := client.NetworkingV1().Ingresses("shop").Create(context.Background(),
			&networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	f := &problemFixture{
		recorder: record.NewFakeRecorder(100),
		metrics:  NewIngressStatusMetrics(prometheus.NewRegistry()),
		logs:     &testlog.Buffer{},
	}
	r, err := NewIngressProblemReporter(IngressProblemOptions{Client: client, Recorder: f.recorder,
		Metrics: f.metrics, Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f.reporter = r
	return f
}

// run starts the reporter as the leader would, until the test ends.
func (f *problemFixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.reporter.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// expectEvents waits for exactly the next len(want) events.
func (f *problemFixture) expectEvents(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case e := <-f.recorder.Events:
			got = append(got, e)
		case <-timeout:
			t.Fatalf("events: got %q, want %q", got, want)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// quietPeriod is how long expectNoMoreEvents listens. Events are sent by
// the reporter's own goroutine, so "none yet" right after the expected ones
// would miss a late extra one.
const quietPeriod = 500 * time.Millisecond

func (f *problemFixture) expectNoMoreEvents(t *testing.T) {
	t.Helper()
	select {
	case e := <-f.recorder.Events:
		t.Errorf("unexpected event %q", e)
	case <-time.After(quietPeriod):
	}
}

func (f *problemFixture) gauge(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	ch := make(chan prometheus.Metric, 16)
	f.metrics.IngressProblems.Collect(ch)
	close(ch)
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		out[labels["namespace"]+"/"+labels["name"]] = d.GetGauge().GetValue()
	}
	return out
}

func shop(name string) model.NamespacedName {
	return model.NamespacedName{Namespace: "shop", Name: name}
}

func TestIngressProblemReporterEvents(t *testing.T) {
	f := newProblemFixture(t, "a", "b", "c")
	f.run(t)

	f.reporter.Report(map[model.NamespacedName][]string{
		shop("a"): {"path \"foo\" must start with /", "service \"x\" not found"},
		shop("b"): {"secret \"tls\" not found"},
	})
	f.expectEvents(t,
		`Warning IngressProblem path "foo" must start with /`,
		`Warning IngressProblem service "x" not found`,
		`Warning IngressProblem secret "tls" not found`)
	if diff := cmp.Diff(map[string]float64{"shop/a": 2, "shop/b": 1}, f.gauge(t)); diff != "" {
		t.Errorf("gauge (-want +got):\n%s", diff)
	}

	// The same problems again: nothing new is announced (the next event
	// seen is the one for the change after it).
	f.reporter.Report(map[model.NamespacedName][]string{
		shop("a"): {"path \"foo\" must start with /", "service \"x\" not found"},
		shop("b"): {"secret \"tls\" not found"},
	})
	// a: one problem fixed, one new; b: all fixed (an empty list).
	f.reporter.Report(map[model.NamespacedName][]string{
		shop("a"): {"path \"foo\" must start with /", "port 81 not found"},
		shop("b"): {},
	})
	f.expectEvents(t,
		`Warning IngressProblem port 81 not found`,
		`Normal IngressProblemsResolved meshpilot found no problems left in this Ingress`)
	if diff := cmp.Diff(map[string]float64{"shop/a": 2}, f.gauge(t)); diff != "" {
		t.Errorf("gauge (-want +got):\n%s", diff)
	}

	// a leaves the report entirely; a problem in an Ingress that was
	// deleted is not announced; c gets one.
	f.reporter.Report(map[model.NamespacedName][]string{
		shop("gone"): {"service \"y\" not found"},
		shop("c"):    {"duplicate path /x"},
	})
	f.expectEvents(t,
		`Normal IngressProblemsResolved meshpilot found no problems left in this Ingress`,
		`Warning IngressProblem duplicate path /x`)
	f.expectNoMoreEvents(t)
	if got := counterValue(t, f.metrics.ProblemEvents.WithLabelValues("Warning")); got != 5 {
		t.Errorf("warning events counted = %v, want 5", got)
	}
	logs := f.logs.String()
	for _, want := range []string{"ingress has problems", "ingress=shop/a", "ingress problems resolved"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
}

// TestIngressProblemReporterFollower checks that a replica that is not
// leading logs and counts but sends nothing, and announces the problems
// present when it takes over.
func TestIngressProblemReporterFollower(t *testing.T) {
	f := newProblemFixture(t, "a", "b")
	f.reporter.Report(map[model.NamespacedName][]string{shop("a"): {"first"}})
	f.reporter.Report(map[model.NamespacedName][]string{shop("a"): {"second"}, shop("b"): {"third"}})
	f.expectNoMoreEvents(t) // a follower sends none
	if diff := cmp.Diff(map[string]float64{"shop/a": 1, "shop/b": 1}, f.gauge(t)); diff != "" {
		t.Errorf("gauge (-want +got):\n%s", diff)
	}
	f.run(t)
	f.expectEvents(t, "Warning IngressProblem second", "Warning IngressProblem third")
}

func TestTruncateMessage(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes
	got := truncateMessage(long)
	if len(got) > maxEventMessage || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "éé") {
		t.Errorf("truncated to %d bytes: %q...", len(got), got[:10])
	}
	if strings.ContainsRune(got, '\uFFFD') || !utf8.ValidString(got) {
		t.Errorf("truncation split a character")
	}
	if short := "ok"; truncateMessage(short) != short {
		t.Errorf("short message changed")
	}
}

// BenchmarkIngressProblemReport is the per-push cost when 1,000 Ingresses
// keep the same problems: the common case, since problems change rarely.
func BenchmarkIngressProblemReport(b *testing.B) {
	r, err := NewIngressProblemReporter(IngressProblemOptions{Client: kubefake.NewClientset()})
	if err != nil {
		b.Fatal(err)
	}
	build := func() map[model.NamespacedName][]string {
		m := make(map[model.NamespacedName][]string, 1000)
		for i := range 1000 {
			m[model.NamespacedName{Namespace: "shop", Name: fmt.Sprintf("ing-%d", i)}] =
				[]string{fmt.Sprintf("service \"svc-%d\" not found", i), "duplicate path /x"}
		}
		return m
	}
	r.Report(build())
	next := build() // an equal report from a new push context
	b.ReportAllocs()
	for b.Loop() {
		r.Report(next)
	}
}
