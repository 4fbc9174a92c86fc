package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/loadtest"
	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/testport"
)

// TestLoad runs `pilot load` as a user does, the built binary, on a small
// scenario: it writes the inputs (through a real API server, or as files
// for the directory source), starts `pilot discovery` as its own child
// process, runs every phase with every kind of client, and prints JSON. The
// test checks that each phase measured what it says it measures; the
// timings themselves belong to `make bench-load`.
func TestLoad(t *testing.T) {
	const (
		services, sidecars, delta, routers, grpcClients = 40, 3, 2, 1, 2
		endpointChanges, configChanges                  = 5, 3
	)
	clients := sidecars + delta + routers + grpcClients
	envoys := sidecars + delta + routers
	cases := []struct {
		name   string
		source func(t *testing.T) (loadArgs, discoveryArgs []string)
	}{
		{"kube", func(t *testing.T) ([]string, []string) {
			env := kubetest.Start(t)
			kc := writeKubeconfig(t, env.Config)
			return []string{"--kubeconfig", kc}, []string{"--kubeconfig", kc}
		}},
		{"dir", func(t *testing.T) ([]string, []string) {
			dir := t.TempDir()
			return []string{"--write-dir", dir}, []string{"--config-dir", dir}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pilot := pilotbin.Path(t)
			loadArgs, discoveryArgs := tc.source(t)
			xds, mon := testport.Addr(t), testport.Addr(t)
			cpLog := filepath.Join(t.TempDir(), "pilot.log")
			args := append([]string{"load"}, loadArgs...)
			args = append(args, "--services", "40", "--namespaces", "4", "--endpoints", "3",
				"--sidecars", "3", "--delta-sidecars", "2", "--routers", "1", "--grpc-clients", "2", "--grpc-targets", "2",
				"--endpoint-changes", "5", "--config-changes", "3", "--churn-rate", "50",
				"--timeout", "60s", "--settle", "30s", "--xds-addr", xds, "--metrics-url", "http://"+mon+"/metrics",
				"--control-plane-log", cpLog, "-o", "json", "-q", "--",
				pilot, "discovery")
			args = append(args, discoveryArgs...)
			args = append(args, "--xds-addr", xds, "--http-addr", testport.Addr(t), "--monitoring-addr", mon,
				"--secure-xds-addr", "", "--webhook-addr", "")
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(pilot, args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				logs, _ := os.ReadFile(cpLog)
				t.Fatalf("pilot load: %v\nstderr:\n%s\ncontrol plane:\n%s", err, stderr.String(), logs)
			}
			r, err := loadtest.ReadReport(&stdout)
			if err != nil {
				t.Fatal(err)
			}
			if r.Source != tc.name || r.Scenario.Services != services || r.Clients[loadtest.KindSidecar] != sidecars ||
				r.Clients[loadtest.KindSidecarDelta] != delta || r.Clients[loadtest.KindRouter] != routers || r.Clients[loadtest.KindGRPC] != grpcClients {
				t.Errorf("report describes another run: source %q, scenario %+v, clients %v", r.Source, r.Scenario, r.Clients)
			}
			// Every client takes part in every phase, except the proxyless
			// ones in the Service phase: they dial port 80 only.
			want := map[string]int{
				loadtest.PhaseConnect:       clients,
				loadtest.PhaseRejoin:        clients,
				loadtest.PhaseEndpoints:     endpointChanges * clients,
				loadtest.PhaseConfigDR:      configChanges * clients,
				loadtest.PhaseConfigService: configChanges * envoys,
				loadtest.PhaseReconnect:     clients,
			}
			if len(r.Phases) != len(want) {
				t.Fatalf("%d phases reported, want %d: %+v", len(r.Phases), len(want), r.Phases)
			}
			for _, p := range r.Phases {
				l := p.Latency
				switch {
				case p.Skipped != "":
					t.Errorf("phase %s skipped: %s", p.Name, p.Skipped)
				case l.Count != want[p.Name] || p.Missed != 0:
					t.Errorf("phase %s: %d samples and %d missed, want %d and none", p.Name, l.Count, p.Missed, want[p.Name])
				case !(0 < l.Min && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max):
					t.Errorf("phase %s: latency not ordered: %+v", p.Name, l)
				case p.ControlPlanePeakRSS <= 0 || p.DurationSeconds <= 0:
					t.Errorf("phase %s: no control-plane RSS or duration: %+v", p.Name, p)
				}
				kinds := 4
				if p.Name == loadtest.PhaseConfigService {
					kinds = 3
				}
				if len(p.ByKind) != kinds {
					t.Errorf("phase %s: latency split into %d kinds of client, want %d", p.Name, len(p.ByKind), kinds)
				}
			}
			byName := map[string]loadtest.Phase{}
			for _, p := range r.Phases {
				byName[p.Name] = p
			}
			// A watcher sees an endpoint change in an EDS response; a
			// DestinationRule change comes as a CDS response.
			if n := byName[loadtest.PhaseEndpoints].PushesPerChange["ClusterLoadAssignment"]; n < 1 {
				t.Errorf("endpoints: %v EDS responses per change per client, want at least 1", n)
			}
			if n := byName[loadtest.PhaseConfigDR].PushesPerChange["Cluster"]; n < 1 {
				t.Errorf("config-dr: %v CDS responses per change per client, want at least 1", n)
			}
			if p := byName[loadtest.PhaseEndpoints]; p.ServerPushes == nil || *p.ServerPushes <= 0 || p.Writes == nil || p.Writes.Count != endpointChanges {
				t.Errorf("endpoints: server pushes %v and writes %+v, want some and %d", p.ServerPushes, p.Writes, endpointChanges)
			}
			// Every client is sent its config on its first connection and
			// again on its second; the count starts before the first push.
			for _, name := range []string{loadtest.PhaseConnect, loadtest.PhaseRejoin} {
				if p := byName[name]; p.ServerPushes == nil || *p.ServerPushes < float64(clients) {
					t.Errorf("%s: server pushes %v, want at least one per client (%d)", name, p.ServerPushes, clients)
				}
			}
			if p := byName[loadtest.PhaseReconnect]; p.FirstFullMs == nil || *p.FirstFullMs != p.Latency.Min {
				t.Errorf("reconnect: first full %v, want the minimum latency %v", p.FirstFullMs, p.Latency.Min)
			}
			if r.PeakRSS <= 0 || r.LoadedRSS <= 0 || r.ToolCPU <= 0 {
				t.Errorf("resources not measured: peak RSS %d, loaded RSS %d, tool CPU %v", r.PeakRSS, r.LoadedRSS, r.ToolCPU)
			}
			// The tool installs what a mesh has before its control plane
			// starts, so nothing in the run is an error to the control plane.
			logs, err := os.ReadFile(cpLog)
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(string(logs)) {
				if strings.Contains(line, "level=ERROR") {
					t.Errorf("the control plane logged an error: %s", line)
				}
			}
		})
	}
}

// TestLoadRefusesBadInput checks flag errors before anything is written
// or started.
func TestLoadRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no source", []string{}, "exactly one of --kubeconfig"},
		{"two sources", []string{"--kubeconfig", "kc", "--write-dir", dir}, "exactly one of --kubeconfig"},
		{"bad output", []string{"--write-dir", dir, "-o", "xml"}, "want table or json"},
		{"no services", []string{"--write-dir", dir, "--services", "0"}, "services: want 1..65536"},
		{"too many endpoints", []string{"--write-dir", dir, "--endpoints", "16"}, "endpoints: want 1..15"},
		{"unknown phase", []string{"--write-dir", dir, "--phases", "connect,warp"}, `unknown phase "warp"`},
		{"no clients", []string{"--write-dir", dir, "--sidecars", "0"}, "no clients"},
		{"pid and command", []string{"--write-dir", dir, "--pid", "1", "--", "true"}, "exclude each other"},
		{"stray argument", []string{"--write-dir", dir, "extra"}, "unexpected arguments"},
		{"missing directory", []string{"--write-dir", filepath.Join(dir, "nope"), "--write-only"}, "must be an existing directory"},
		{"unreadable kubeconfig", []string{"--kubeconfig", filepath.Join(dir, "nope")}, "--kubeconfig"},
		{"zero churn rate", []string{"--write-dir", dir, "--churn-rate", "0"}, "churn rate must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append([]string{"load"}, tc.args...))
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("pilot load %q: error %v, want one containing %q", tc.args, err, tc.wantErr)
			}
		})
	}
}
