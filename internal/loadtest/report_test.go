package loadtest

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNewDist(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	d := NewDist(s)
	want := Dist{Count: 100, Min: 1, P50: 50, P90: 90, P99: 99, Max: 100}
	if d != want {
		t.Errorf("NewDist(1..100 ms) = %+v, want %+v", d, want)
	}
	if got := NewDist([]time.Duration{3 * time.Millisecond}); got.Min != 3 || got.P99 != 3 || got.Max != 3 {
		t.Errorf("NewDist(one sample) = %+v", got)
	}
	if got := NewDist(nil); got != (Dist{}) {
		t.Errorf("NewDist(nil) = %+v", got)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	pushes := 12.0
	first := 3.5
	switches, faults, sys := int64(6452), int64(3418), 0.21
	r := &Report{Version: ReportVersion, Started: time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC), Scenario: StandardScenario(),
		Source: "kube", Clients: map[Kind]int{KindSidecar: 2, KindGRPC: 1},
		Phases: []Phase{
			{Name: PhaseConnect, Latency: NewDist([]time.Duration{time.Millisecond, 2 * time.Millisecond}),
				ByKind: map[Kind]Dist{KindSidecar: NewDist([]time.Duration{time.Millisecond})}, ControlPlaneCPU: 0.25,
				ControlPlaneSwitches: &switches, ControlPlanePageFaults: &faults, ControlPlaneSystemCPU: &sys},
			{Name: PhaseEndpoints, Changes: 3, Watchers: 3, PushesPerChange: map[string]float64{"ClusterLoadAssignment": 1},
				ServerPushes: &pushes, Writes: &Dist{Count: 3, P50: 2}, FanOut: &Dist{Count: 3, P50: 4.25}},
			{Name: PhaseReconnect, FirstFullMs: &first},
			{Name: "skipped one", Skipped: "why"},
		},
		PeakRSS: 1 << 20, ToolCPU: 0.5}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip changed the report:\n got %+v\nwant %+v", got, r)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Phases {
		if !strings.Contains(table.String(), p.Name) {
			t.Errorf("table does not name phase %q:\n%s", p.Name, table.String())
		}
	}
	if !strings.Contains(table.String(), "first to last watcher p50 4.2 ms") {
		t.Errorf("table does not show the endpoint phase's fan-out:\n%s", table.String())
	}
	for _, figure := range []string{"0.21", "6452", "3418"} {
		if !strings.Contains(table.String(), " "+figure+" ") {
			t.Errorf("table does not show the connect phase's %s (system CPU, context switches, page faults):\n%s", figure, table.String())
		}
	}
}

func TestReadReportRefuses(t *testing.T) {
	for _, in := range []string{`{"version": 99}`, `{"version": 1, "unknown": true}`, `not json`} {
		if _, err := ReadReport(strings.NewReader(in)); err == nil {
			t.Errorf("ReadReport(%s): no error", in)
		}
	}
}
