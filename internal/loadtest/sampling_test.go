package loadtest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSelfSource(t *testing.T) {
	u, err := SelfSource{}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSBytes <= 0 || u.CPUSeconds < 0 || u.Instance == "" {
		t.Errorf("SelfSource.Read() = %+v, want a positive RSS", u)
	}
	if _, err := (ProcSource{PID: func() int { return 0 }}).Read(); err == nil {
		t.Error("ProcSource with no PID: no error")
	}
}

func TestMetricsSource(t *testing.T) {
	const body = `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.25
process_resident_memory_bytes 4.2e+07
process_start_time_seconds 1.7e+09
meshpilot_xds_pushes_total{type="cds"} 3
meshpilot_xds_pushes_total{type="eds"} 4
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer srv.Close()
	u, err := MetricsSource{URL: srv.URL}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if u.CPUSeconds != 1.25 || u.RSSBytes != 42e6 {
		t.Errorf("MetricsSource.Read() = %+v", u)
	}
	v, err := scrape(strings.NewReader(body), "meshpilot_xds_pushes_total")
	if err != nil || v["meshpilot_xds_pushes_total"] != 7 {
		t.Errorf("scrape summed %v, %v; want 7", v, err)
	}
	empty := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer empty.Close()
	if _, err := (MetricsSource{URL: empty.URL}).Read(); err == nil {
		t.Error("metrics without process metrics: no error")
	}
}

func TestCPUSinceAcrossRestart(t *testing.T) {
	a := Usage{Instance: "1", CPUSeconds: 5}
	if got := cpuSince(a, Usage{Instance: "1", CPUSeconds: 7}); got != 2 {
		t.Errorf("same process: %v, want 2", got)
	}
	if got := cpuSince(a, Usage{Instance: "2", CPUSeconds: 0.5}); got != 0.5 {
		t.Errorf("restarted process: %v, want 0.5", got)
	}
}

func TestSamplerPeak(t *testing.T) {
	s := NewSampler(SelfSource{}, time.Millisecond)
	from := time.Now()
	s.Now()
	s.Now()
	if s.Peak(from, time.Now()) <= 0 {
		t.Error("no peak RSS after two samples")
	}
	if s.Peak(time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)) != 0 {
		t.Error("peak outside the samples' window")
	}
}
