package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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
}

// cpuSince is the CPU time spent between two readings.
func cpuSince(before, after Usage) float64 {
	if before.Instance != after.Instance {
		return after.CPUSeconds
	}
	return after.CPUSeconds - before.CPUSeconds
}

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
	return procUsage(strconv.Itoa(pid))
}

// SelfSource reads the tool's own usage.
type SelfSource struct{}

// Read implements Source.
func (SelfSource) Read() (Usage, error) { return procUsage(strconv.Itoa(os.Getpid())) }

func procUsage(pid string) (Usage, error) {
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
	f := strings.Fields(string(stat[i+1:]))
	// utime and stime are fields 14 and 15; f[0] is field 3.
	if len(f) < 13 {
		return Usage{}, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return Usage{}, fmt.Errorf("/proc/%s/stat: bad CPU times", pid)
	}
	u := Usage{At: now, Instance: pid, CPUSeconds: float64(ut+st) / clockTicks}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return Usage{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return Usage{}, fmt.Errorf("/proc/%s/status: VmRSS: %w", pid, err)
			}
			u.RSSBytes = kb * 1024
		}
	}
	return u, nil
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
		CPUSeconds: cpu, RSSBytes: int64(rss)}, nil
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
