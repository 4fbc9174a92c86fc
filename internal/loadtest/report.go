package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Dist is a latency distribution in milliseconds. Percentiles are nearest
// rank: p90 is the sample at or below which 90% of samples lie.
type Dist struct {
	Count int     `json:"count"`
	Min   float64 `json:"minMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

// NewDist summarizes samples.
func NewDist(samples []time.Duration) Dist {
	if len(samples) == 0 {
		return Dist{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	return Dist{Count: len(s), Min: ms(s[0]), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// Phase is the result of one phase.
type Phase struct {
	Name string `json:"name"`
	// Skipped says why the phase did not run; nothing else is set then.
	Skipped string `json:"skipped,omitempty"`
	// What Latency measures, in words.
	Measures string `json:"measures,omitempty"`
	Latency  Dist   `json:"latency"`
	// ByKind splits Latency by kind of client, when there is more than one.
	ByKind map[Kind]Dist `json:"byKind,omitempty"`
	// Changes is how many writes the phase made (churn phases).
	Changes int `json:"changes,omitempty"`
	// Watchers is how many clients were expected to see each change.
	Watchers int `json:"watchers,omitempty"`
	// Missed counts (client, change) pairs never seen before the deadline.
	Missed int `json:"missed"`
	// PushesPerChange is the mean number of responses of each type (short
	// type name) a watching client received per change, until it held it.
	PushesPerChange map[string]float64 `json:"pushesPerChange,omitempty"`
	// ServerPushes is the control plane's own count of pushes
	// (meshpilot_xds_pushes_total) during the phase, when its metrics
	// endpoint is known.
	ServerPushes *float64 `json:"serverPushes,omitempty"`
	// Writes is the API write latency of the churn (the part of Latency
	// spent before the control plane can know of the change).
	Writes *Dist `json:"writes,omitempty"`
	// FanOut is, for churn phases, each change's spread from the first
	// watcher holding it to the last: how long the update took to go round
	// the watchers once it reached one.
	FanOut *Dist `json:"fanOut,omitempty"`
	// FirstFull is, for the reconnect phase, the time from the new process
	// start to the first client with a full config.
	FirstFullMs *float64 `json:"firstFullMs,omitempty"`
	// DowntimeMs is, for the reconnect phase, how long the stop took.
	DowntimeMs *float64 `json:"downtimeMs,omitempty"`

	DurationSeconds     float64 `json:"durationSeconds"`
	ControlPlaneCPU     float64 `json:"controlPlaneCpuSeconds"`
	ControlPlanePeakRSS int64   `json:"controlPlanePeakRssBytes"`
	// ControlPlaneSwitches counts the control plane's context switches in
	// the phase, ControlPlaneSystemCPU the part of its CPU spent in the
	// kernel and ControlPlanePageFaults the pages it faulted in, when it is
	// sampled from /proc; across a restart, as ControlPlaneCPU, the new
	// process's since it started.
	ControlPlaneSwitches   *int64   `json:"controlPlaneContextSwitches,omitempty"`
	ControlPlaneSystemCPU  *float64 `json:"controlPlaneSystemCpuSeconds,omitempty"`
	ControlPlanePageFaults *int64   `json:"controlPlanePageFaults,omitempty"`
	ToolCPU                float64  `json:"toolCpuSeconds"`
}

// Report is the result of a run; its JSON form is what runs are compared by.
type Report struct {
	Version  int          `json:"version"`
	Started  time.Time    `json:"started"`
	Scenario Scenario     `json:"scenario"`
	Source   string       `json:"source"`
	Clients  map[Kind]int `json:"clients"`
	Phases   []Phase      `json:"phases"`
	// ControlPlane RSS: when the tool started, after the scenario was loaded
	// (no clients yet), and the highest sampled.
	StartRSS  int64 `json:"controlPlaneStartRssBytes"`
	LoadedRSS int64 `json:"controlPlaneLoadedRssBytes"`
	PeakRSS   int64 `json:"controlPlanePeakRssBytes"`
	// InputSeconds is how long writing the scenario took.
	InputSeconds float64 `json:"inputSeconds"`
	// SettleSeconds is how long the control plane took to go idle after the
	// scenario was written.
	SettleSeconds float64 `json:"settleSeconds"`
	ToolCPU       float64 `json:"toolCpuSeconds"`
	ToolPeakRSS   int64   `json:"toolPeakRssBytes"`
	// SampleErrors counts failed readings of the control plane's usage (a
	// restart causes a few).
	SampleErrors int `json:"sampleErrors"`
}

// ReportVersion is bumped when the JSON changes incompatibly.
const ReportVersion = 1

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadReport parses what WriteJSON wrote.
func ReadReport(rd io.Reader) (*Report, error) {
	var r Report
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("read load report: %w", err)
	}
	if r.Version != ReportVersion {
		return nil, fmt.Errorf("read load report: version %d, want %d", r.Version, ReportVersion)
	}
	return &r, nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// orDash formats *v, or "-" for a figure the source does not give.
func orDash[T int64 | float64](v *T, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// WriteTable writes r as a table for people.
func (r *Report) WriteTable(w io.Writer) error {
	var kinds []string
	for k, n := range r.Clients {
		if n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "scenario: %d services × %d endpoints in %d namespaces (pods %t, destination rules %t), source %s; clients: %s\n",
		r.Scenario.Services, r.Scenario.Endpoints, r.Scenario.Namespaces, r.Scenario.Pods, r.Scenario.DestinationRules,
		r.Source, strings.Join(kinds, ", "))
	fmt.Fprintf(w, "inputs written in %.1fs; control plane idle %.1fs later\n\n", r.InputSeconds, r.SettleSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tn\tmin ms\tp50 ms\tp90 ms\tp99 ms\tmax ms\tmissed\tcp CPU s\tcp sys s\tcp switches\tcp faults\tcp peak MiB\ttool CPU s\t")
	for _, p := range r.Phases {
		if p.Skipped != "" {
			fmt.Fprintf(tw, "%s%s\t\n", p.Name, strings.Repeat("\t-", 13))
			continue
		}
		l := p.Latency
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.2f\t%s\t%s\t%s\t%s\t%.2f\t\n", p.Name, l.Count,
			l.Min, l.P50, l.P90, l.P99, l.Max, p.Missed, p.ControlPlaneCPU, orDash(p.ControlPlaneSystemCPU, "%.2f"),
			orDash(p.ControlPlaneSwitches, "%d"), orDash(p.ControlPlanePageFaults, "%d"), mib(p.ControlPlanePeakRSS), p.ToolCPU)
		kinds := make([]string, 0, len(p.ByKind))
		for k := range p.ByKind {
			kinds = append(kinds, string(k))
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			d := p.ByKind[Kind(k)]
			fmt.Fprintf(tw, "  %s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f%s\t\n", k, d.Count, d.Min, d.P50, d.P90, d.P99, d.Max, strings.Repeat("\t", 7))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, p := range r.Phases {
		switch {
		case p.Skipped != "":
			fmt.Fprintf(w, "%s: skipped: %s\n", p.Name, p.Skipped)
		default:
			fmt.Fprintf(w, "%s: %s", p.Name, p.Measures)
			if p.Changes > 0 {
				fmt.Fprintf(w, "; %d changes × %d watchers", p.Changes, p.Watchers)
			}
			if len(p.PushesPerChange) > 0 {
				fmt.Fprintf(w, "; responses per change per client: %s", formatPushes(p.PushesPerChange))
			}
			if p.ServerPushes != nil {
				fmt.Fprintf(w, "; server pushes %.0f", *p.ServerPushes)
			}
			if p.Writes != nil {
				fmt.Fprintf(w, "; API write p50 %.1f ms", p.Writes.P50)
			}
			if p.FanOut != nil {
				fmt.Fprintf(w, "; first to last watcher p50 %.1f ms", p.FanOut.P50)
			}
			if p.FirstFullMs != nil {
				fmt.Fprintf(w, "; first client full %.1f ms after the new process started", *p.FirstFullMs)
			}
			if p.DowntimeMs != nil {
				fmt.Fprintf(w, "; stop took %.1f ms", *p.DowntimeMs)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "\ncontrol plane RSS: %s MiB at start, %s MiB with the scenario loaded (no clients), peak %s MiB; tool CPU %.2fs, tool peak RSS %s MiB\n",
		mib(r.StartRSS), mib(r.LoadedRSS), mib(r.PeakRSS), r.ToolCPU, mib(r.ToolPeakRSS))
	return nil
}

func formatPushes(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, m[k])
	}
	return strings.Join(parts, ", ")
}
