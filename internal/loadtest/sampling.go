package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Usage is one reading of a process's resources.
type Usage struct {
	At time.Time `json:"-"`
	// Instance tells processes apart across a restart (the PID, or the
	// start time a metrics endpoint reports): CPU time starts again at zero
	// in a new one.
	Instance   string  `json:"-"`
	CPUSeconds float64 `json:"cpuSeconds"`
	RSSBytes   int64   `json:"rssBytes"`
	// ContextSwitches sums the voluntary and involuntary context switches
	// of the process's threads; -1 where the source cannot tell.
	ContextSwitches int64 `json:"contextSwitches"`
	// SystemCPUSeconds is the part of CPUSeconds spent in the kernel, and
	// PageFaults counts the pages the process faulted in (minor and major);
	// both -1 where the source cannot tell. Where a system call or a fault
	// is expensive (some virtual machines charge ten microseconds and more
	// for a fault), they account for CPU time that a CPU profile files
	// under the runtime or leaves out.
	SystemCPUSeconds float64 `json:"systemCpuSeconds"`
	PageFaults       int64   `json:"pageFaults"`
}

// cpuSince is the CPU time spent between two readings.
func cpuSince(before, after Usage) float64 {
	if before.Instance != after.Instance {
		return after.CPUSeconds
	}
	return after.CPUSeconds - before.CPUSeconds
}

// counterSince is how much one of a process's counters (context switches,
// page faults, system CPU) grew between two readings, if the source keeps
// it (a negative count: it does not); across a restart, as cpuSince, the
// new process's count since it started.
func counterSince[T int64 | float64](before, after Usage, count func(Usage) T) (T, bool) {
	b, a := count(before), count(after)
	switch {
	case a < 0:
		return 0, false
	case before.Instance != after.Instance:
		return a, true
	case b < 0:
		return 0, false
	}
	return a - b, true
}

func contextSwitches(u Usage) int64 { return u.ContextSwitches }
func pageFaults(u Usage) int64      { return u.PageFaults }
func systemCPU(u Usage) float64     { return u.SystemCPUSeconds }

// Source reads a process's current usage.
type Source interface {
	Read() (Usage, error)
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat. It
// is 100 on every Linux architecture Go supports; reading it needs cgo
// (sysconf), which the tool does without.
const clockTicks = 100

// ProcSource reads /proc/<pid>; PID is asked on every read, so that it can
// follow a restarted process.
type ProcSource struct{ PID func() int }

// Read implements Source.
func (p ProcSource) Read() (Usage, error) {
	pid := p.PID()
	if pid <= 0 {
		return Usage{}, fmt.Errorf("no process to sample")
	}
	return procUsage(strconv.Itoa(pid), true)
}

// SelfSource reads the tool's own usage.
type SelfSource struct{}

// Read implements Source. The tool does not count its own context
// switches: that would read a status file per thread on every sample.
func (SelfSource) Read() (Usage, error) { return procUsage(strconv.Itoa(os.Getpid()), false) }

func procUsage(pid string, switches bool) (Usage, error) {
	now := time.Now()
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return Usage{}, err
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis are plain.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return Usage{}, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	u, err := parseStat(stat[i+1:])
	if err != nil {
		return Usage{}, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	u.At, u.Instance, u.ContextSwitches = now, pid, -1
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return Usage{}, err
	}
	kb, ok := statusValue(status, "VmRSS")
	if !ok {
		return Usage{}, fmt.Errorf("/proc/%s/status: no VmRSS", pid)
	}
	u.RSSBytes = kb * 1024
	if switches {
		if u.ContextSwitches, err = threadSwitches(pid); err != nil {
			return Usage{}, err
		}
	}
	return u, nil
}

// parseStat reads the fields of a /proc/<pid>/stat line that follow the
// command name: minflt (field 10), majflt (12), utime (14) and stime (15),
// which count the whole process, every thread of it.
func parseStat(afterName []byte) (Usage, error) {
	f := strings.Fields(string(afterName))
	if len(f) < 13 { // f[0] is field 3
		return Usage{}, fmt.Errorf("%d fields", len(f)+2)
	}
	var v [4]uint64
	for i, field := range [4]int{10, 12, 14, 15} {
		n, err := strconv.ParseUint(f[field-3], 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("field %d: %w", field, err)
		}
		v[i] = n
	}
	minflt, majflt, ut, st := v[0], v[1], v[2], v[3]
	return Usage{
		CPUSeconds:       float64(ut+st) / clockTicks,
		SystemCPUSeconds: float64(st) / clockTicks,
		PageFaults:       int64(minflt + majflt),
	}, nil
}

// threadSwitches sums the context switches of pid's threads. The process's
// own status file counts its main thread's alone; a thread that has exited
// takes its count with it (Go's runtime rarely ends one).
//
// Switches are worth counting on their own: where a context switch is
// expensive (ten microseconds or more in some virtual machines), the Go
// scheduler parking and waking threads can be a large share of the CPU time
// a phase costs, and the CPU profile files it under the runtime.
func threadSwitches(pid string) (int64, error) {
	dir := "/proc/" + pid + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, t := range tasks {
		status, err := os.ReadFile(dir + t.Name() + "/status")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return 0, err
		}
		v, ok1 := statusValue(status, "voluntary_ctxt_switches")
		nv, ok2 := statusValue(status, "nonvoluntary_ctxt_switches")
		if !ok1 || !ok2 {
			return 0, fmt.Errorf("%s%s/status: no context switch counts", dir, t.Name())
		}
		n += v + nv
	}
	return n, nil
}

// statusValue is the leading number of the line "key:" in a
// /proc/.../status file (a size's " kB" unit is left off).
func statusValue(status []byte, key string) (int64, bool) {
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte(key+":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(string(f[0]), 10, 64)
		return v, err == nil
	}
	return 0, false
}

// MetricsSource reads the process collector's metrics from a Prometheus
// /metrics endpoint: process_cpu_seconds_total, process_resident_memory_bytes
// and process_start_time_seconds.
type MetricsSource struct {
	URL    string
	Client *http.Client
}

// Read implements Source.
func (m MetricsSource) Read() (Usage, error) {
	now := time.Now()
	hc := m.Client
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	resp, err := hc.Get(m.URL)
	if err != nil {
		return Usage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Usage{}, fmt.Errorf("GET %s: %s", m.URL, resp.Status)
	}
	vals, err := scrape(resp.Body, "process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds")
	if err != nil {
		return Usage{}, err
	}
	cpu, ok1 := vals["process_cpu_seconds_total"]
	rss, ok2 := vals["process_resident_memory_bytes"]
	if !ok1 || !ok2 {
		return Usage{}, fmt.Errorf("%s has no process_cpu_seconds_total or process_resident_memory_bytes", m.URL)
	}
	return Usage{At: now, Instance: strconv.FormatFloat(vals["process_start_time_seconds"], 'f', -1, 64),
		CPUSeconds: cpu, RSSBytes: int64(rss), ContextSwitches: -1, SystemCPUSeconds: -1, PageFaults: -1}, nil
}

// scrape sums the samples of the named metrics in Prometheus text format.
func scrape(r io.Reader, names ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !want[name] {
			continue
		}
		rest := line[len(name):]
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// Sampler reads a Source at an interval and keeps the peak RSS, so that a
// phase can ask for its CPU time (two readings) and its peak.
type Sampler struct {
	src      Source
	interval time.Duration

	mu      sync.Mutex
	samples []Usage
	errs    int
	lastErr error
}

// NewSampler samples src every interval once Run starts.
func NewSampler(src Source, interval time.Duration) *Sampler {
	return &Sampler{src: src, interval: interval}
}

// Run samples until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.Now()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Now takes a reading at once and records it. A failed read (a process
// restarting) returns the zero Usage and is counted.
func (s *Sampler) Now() Usage {
	u, err := s.src.Read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
		s.lastErr = err
		return Usage{}
	}
	s.samples = append(s.samples, u)
	return u
}

// Peak is the highest RSS sampled in [from, to].
func (s *Sampler) Peak(from, to time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var peak int64
	for _, u := range s.samples {
		if !u.At.Before(from) && !u.At.After(to) {
			peak = max(peak, u.RSSBytes)
		}
	}
	return peak
}

// Errors is how many reads failed, and the last failure.
func (s *Sampler) Errors() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errs, s.lastErr
}
