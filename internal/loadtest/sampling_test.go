package loadtest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"syscall"
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

func TestProcSourceCountsThreadSwitches(t *testing.T) {
	src := ProcSource{PID: os.Getpid}
	before, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	sleepOffMain(200)
	after, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := counterSince(before, after, contextSwitches); !ok || n < 200 {
		t.Errorf("200 sleeps on a thread of their own: %d context switches counted (known %t), want at least 200", n, ok)
	}
	if self, err := (SelfSource{}).Read(); err != nil || self.ContextSwitches != -1 {
		t.Errorf("SelfSource.Read() = %+v, %v; want context switches left uncounted (-1)", self, err)
	}
}

// sleepOffMain sleeps n times in a system call on a thread other than the
// process's main one: each sleep is a voluntary context switch that the
// main thread's status file, which /proc/<pid>/status is, does not count.
func sleepOffMain(n int) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if syscall.Gettid() == syscall.Getpid() {
			sleepOffMain(n) // holding the main thread meanwhile
			return
		}
		ts := syscall.Timespec{Nsec: int64(20 * time.Microsecond)}
		for range n {
			_ = syscall.Nanosleep(&ts, nil)
		}
	}()
	<-done
}

func TestStatusValue(t *testing.T) {
	status := []byte("Name:\tpilot\nVmRSS:\t  81920 kB\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\nBad:\tx\n")
	for _, tc := range []struct {
		key  string
		want int64
		ok   bool
	}{
		{"VmRSS", 81920, true},
		{"voluntary_ctxt_switches", 12, true}, // not the nonvoluntary line it ends
		{"nonvoluntary_ctxt_switches", 3, true},
		{"VmHWM", 0, false},
		{"Bad", 0, false},
	} {
		got, ok := statusValue(status, tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("statusValue(%q) = %d, %t; want %d, %t", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCounterSince(t *testing.T) {
	a := Usage{Instance: "1", ContextSwitches: 100, SystemCPUSeconds: 0.5}
	for _, tc := range []struct {
		name   string
		after  Usage
		want   int64
		wantOK bool
	}{
		{"same process", Usage{Instance: "1", ContextSwitches: 130}, 30, true},
		{"restarted: the new process's own", Usage{Instance: "2", ContextSwitches: 5}, 5, true},
		{"not counted", Usage{Instance: "1", ContextSwitches: -1}, 0, false},
		{"restarted, not counted", Usage{Instance: "2", ContextSwitches: -1}, 0, false},
	} {
		if got, ok := counterSince(a, tc.after, contextSwitches); got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: counterSince = %d, %t; want %d, %t", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
	if got, ok := counterSince(a, Usage{Instance: "1", SystemCPUSeconds: 0.75}, systemCPU); got != 0.25 || !ok {
		t.Errorf("system CPU: counterSince = %v, %t; want 0.25, true", got, ok)
	}
	if _, ok := counterSince(Usage{Instance: "1", PageFaults: -1}, Usage{Instance: "1", PageFaults: 9}, pageFaults); ok {
		t.Error("page faults from a reading that did not count them: counted")
	}
}

func TestParseStat(t *testing.T) {
	// What follows "(pilot) " in /proc/<pid>/stat: state, ppid, ... with
	// minflt 4000 (field 10), majflt 7 (12), utime 150 (14), stime 50 (15).
	line := []byte(" S 1 2 3 4 5 6 4000 11 7 13 150 50 0 0 20 0 9 0 100 200 300")
	u, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if u.PageFaults != 4007 || u.CPUSeconds != 2 || u.SystemCPUSeconds != 0.5 {
		t.Errorf("parseStat = %+v; want 4007 faults, 2 s of CPU of which 0.5 s in the kernel", u)
	}
	for _, bad := range []string{" S 1 2 3", " S 1 2 3 4 5 6 4000 11 x 13 150 50"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

// TestProcSourceCountsFaultsAndSystemCPU checks the readings against work
// whose kind is known: pages touched for the first time, and system calls.
func TestProcSourceCountsFaultsAndSystemCPU(t *testing.T) {
	src := ProcSource{PID: os.Getpid}
	before, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	const pages = 2048
	mem, err := syscall.Mmap(-1, 0, pages*4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	// Small pages even where transparent huge pages are always on, which
	// would fault the whole mapping in with a handful of faults.
	if err := syscall.Madvise(mem, syscall.MADV_NOHUGEPAGE); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	// System calls until the kernel's share has grown by two ticks.
	var after Usage
	for deadline := time.Now().Add(30 * time.Second); ; {
		for range 10_000 {
			syscall.Getppid()
		}
		if after, err = src.Read(); err != nil {
			t.Fatal(err)
		}
		if after.SystemCPUSeconds-before.SystemCPUSeconds >= 2.0/clockTicks || time.Now().After(deadline) {
			break
		}
	}
	if n, ok := counterSince(before, after, pageFaults); !ok || n < pages {
		t.Errorf("%d fresh pages touched: %d page faults counted (known %t), want at least %d", pages, n, ok, pages)
	}
	sys, ok := counterSince(before, after, systemCPU)
	// Both are whole ticks over clockTicks, subtracted in floating point:
	// with no user time between the readings they may differ in the last
	// bit, so "no more than all" allows less than a tick's thousandth.
	if total := cpuSince(before, after); !ok || sys < 2.0/clockTicks || sys > total+1e-3/clockTicks {
		t.Errorf("system calls for up to 30 s: %.2f s of system CPU (known %t) of %.2f s in all; want at least 0.02 s, and no more than all", sys, ok, total)
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
	if u.CPUSeconds != 1.25 || u.RSSBytes != 42e6 || u.ContextSwitches != -1 || u.SystemCPUSeconds != -1 || u.PageFaults != -1 {
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
