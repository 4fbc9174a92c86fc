package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/internal/loadtest"
	"github.com/meshpilot/meshpilot/pkg/controllers"
)

func newLoadCommand() *cobra.Command {
	scn := loadtest.StandardScenario()
	cfg := loadtest.Config{ChurnService: 0}
	var (
		kubeconfig, writeDir, output, metricsURL, cpLog, jsonOut, cpuProfile string
		pid                                                                  int
		writeOnly, quiet                                                     bool
		sidecars, deltaSidecars, routers, grpcClients                        int
		phases                                                               []string
	)
	cmd := &cobra.Command{
		Use:   "load [flags] [-- control-plane command...]",
		Short: "Put a mesh of a chosen size and many xDS clients in front of a control plane, and measure it",
		Long: `Load a running control plane and measure how fast it serves.

The scenario (--services × --endpoints, in --namespaces) is written through a
real API server (--kubeconfig) or as YAML files for the directory source
(--write-dir, which the control plane reads with --config-dir). Then the
clients connect to --xds-addr, each with its own node ID: Envoy sidecars over
SotW and delta ADS, routers, and proxyless gRPC clients. The phases are

  connect         all clients connect at once; time until each is fully warm
  rejoin          all clients drop their connections and connect again; time until each is full again
  endpoints       one EndpointSlice changes; time from the write to each watcher's EDS update
  config-dr       one DestinationRule changes; time until each client serves the changed cluster
  config-service  one Service gets a new port; time until each Envoy client serves its cluster
  reconnect       the control plane restarts; time until each client has a full config again

each reported as min / p50 / p90 / p99 / max, with the control plane's CPU and
RSS (from /proc by --pid, from --metrics-url, or of the process this command
starts), its system CPU, context switches and page faults (from /proc only)
and the tool's own CPU; the churn phases also report each change's spread from
its first watcher to its last. Give the control plane's command line after --
and the tool starts it, samples it and can restart it for the reconnect phase.`,
		Example: `  # the standard scenario against a control plane the tool starts:
  pilot load --kubeconfig kc --xds-addr 127.0.0.1:15010 -- bin/pilot discovery --kubeconfig kc
  # a small run against a control plane already running, JSON out:
  pilot load --kubeconfig kc --services 100 --sidecars 5 --pid 4242 -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var cpArgs []string
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				cpArgs = args[dash:]
				args = args[:dash]
			}
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q: a control-plane command goes after --", args)
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("-o: want table or json, got %q", output)
			}
			if (kubeconfig == "") == (writeDir == "") {
				return errors.New("give exactly one of --kubeconfig (API server inputs) and --write-dir (directory inputs)")
			}
			if pid != 0 && len(cpArgs) > 0 {
				return errors.New("--pid and a control-plane command exclude each other: the tool samples the process it starts")
			}
			if err := scn.Validate(); err != nil {
				return err
			}
			progress := cmd.ErrOrStderr()
			if quiet {
				progress = io.Discard
			}

			if kubeconfig != "" {
				inputs, err := kubeInputs(kubeconfig, scn)
				if err != nil {
					return err
				}
				cfg.Inputs, cfg.Source = inputs, "kube"
			} else {
				cfg.Inputs, cfg.Source = &loadtest.DirInputs{Scenario: scn, Dir: writeDir}, "dir"
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if writeOnly {
				return cfg.Inputs.Create(ctx, func(done, total int) {
					if done == total {
						fmt.Fprintf(progress, "load: %d services written\n", total)
					}
				})
			}

			cfg.Scenario, cfg.MetricsURL, cfg.Progress = scn, metricsURL, progress
			cfg.Clients = map[loadtest.Kind]int{loadtest.KindSidecar: sidecars, loadtest.KindSidecarDelta: deltaSidecars,
				loadtest.KindRouter: routers, loadtest.KindGRPC: grpcClients}
			cfg.Phases = phases
			if err := cfg.Validate(); err != nil {
				return err
			}
			switch {
			case len(cpArgs) > 0:
				if err := cfg.Inputs.Install(ctx); err != nil {
					return err
				}
				out, closeLog, err := openLog(cpLog, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				defer closeLog()
				proc := &loadtest.Process{Argv: cpArgs, Stdout: out, Stderr: out}
				if err := proc.Start(); err != nil {
					return err
				}
				defer func() {
					if err := proc.Stop(); err != nil {
						fmt.Fprintln(cmd.ErrOrStderr(), "load:", err)
					}
				}()
				cfg.ControlPlane, cfg.Usage = proc, loadtest.ProcSource{PID: proc.PID}
			case pid != 0:
				p := pid
				cfg.Usage = loadtest.ProcSource{PID: func() int { return p }}
			case metricsURL != "":
				cfg.Usage = loadtest.MetricsSource{URL: metricsURL}
			default:
				fmt.Fprintln(progress, "load: no --pid, --metrics-url or control-plane command: the control plane's CPU and RSS are not measured")
			}

			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			report, runErr := loadtest.Run(ctx, cfg)
			if report != nil {
				w := cmd.OutOrStdout()
				var err error
				if output == "json" {
					err = report.WriteJSON(w)
				} else {
					err = report.WriteTable(w)
				}
				if err == nil && jsonOut != "" {
					err = writeReportFile(jsonOut, report)
				}
				if err != nil && runErr == nil {
					runErr = err
				}
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the API server to write the scenario to")
	f.StringVar(&writeDir, "write-dir", "", "write the scenario as YAML into this existing directory (the control plane's --config-dir) instead")
	f.BoolVar(&writeOnly, "write-only", false, "write the scenario and exit, without clients")
	f.BoolVar(&cfg.InputsExist, "inputs-exist", false, "the scenario was written before (by --write-only or an earlier run with the same sizes): do not write it again")
	f.IntVar(&scn.Services, "services", scn.Services, "number of Services")
	f.IntVar(&scn.Endpoints, "endpoints", scn.Endpoints, "ready endpoints in each Service's EndpointSlice (1-15)")
	f.IntVar(&scn.Namespaces, "namespaces", scn.Namespaces, "namespaces the Services are spread over (scale-0, scale-1, ...)")
	f.BoolVar(&scn.Pods, "pods", scn.Pods, "back every endpoint with a Pod")
	f.BoolVar(&scn.DestinationRules, "destination-rules", scn.DestinationRules, "give every Service a DestinationRule")
	f.StringVar(&scn.Domain, "domain", scn.Domain, "DNS domain suffix of the cluster, as the control plane's --domain")
	f.StringVar(&cfg.XDSAddr, "xds-addr", "127.0.0.1:15010", "address of the control plane's plaintext xDS server")
	f.IntVar(&sidecars, "sidecars", 50, "Envoy sidecars over state-of-the-world ADS")
	f.IntVar(&deltaSidecars, "delta-sidecars", 0, "Envoy sidecars over delta ADS")
	f.IntVar(&routers, "routers", 0, "Envoy routers (ingress gateways) over state-of-the-world ADS")
	f.IntVar(&grpcClients, "grpc-clients", 0, "proxyless gRPC clients")
	f.IntVar(&cfg.GRPCTargets, "grpc-targets", 10, "services each proxyless gRPC client dials")
	f.IntVar(&pid, "pid", 0, "PID of the control plane, to sample its CPU and RSS from /proc")
	f.StringVar(&metricsURL, "metrics-url", "", "the control plane's Prometheus /metrics URL: its CPU and RSS when there is no PID, and its push count")
	f.StringVar(&cpLog, "control-plane-log", "", "file for the output of the control plane the tool starts (default: this command's stderr)")
	f.StringSliceVar(&phases, "phases", loadtest.PhaseNames, "phases to run ("+strings.Join(loadtest.PhaseNames, ", ")+"); connect always runs")
	f.IntVar(&cfg.EndpointChanges, "endpoint-changes", 100, "EndpointSlice writes of the endpoints phase")
	f.IntVar(&cfg.ConfigChanges, "config-changes", 20, "writes of each config phase")
	f.Float64Var(&cfg.ChurnRate, "churn-rate", 10, "highest churn writes per second (a write also waits for the previous one to be seen)")
	f.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "longest wait for all clients to be full, or to see one change")
	f.DurationVar(&cfg.Settle, "settle", 2*time.Minute, "longest wait for the control plane to go idle after the scenario is written")
	f.DurationVar(&cfg.SampleInterval, "sample-interval", 100*time.Millisecond, "how often CPU and RSS are sampled")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.StringVar(&jsonOut, "json-out", "", "also write the report as JSON to this file, to compare runs")
	f.StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the tool itself to this file, to check that the clients stay cheap")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

// kubeInputs builds clients for the scenario writes. client-go's default
// rate limit (5 QPS) would take an hour over the standard scenario.
func kubeInputs(kubeconfig string, scn loadtest.Scenario) (*loadtest.KubeInputs, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 2000, 4000
	// Protobuf, as the controller manager writes EndpointSlices.
	kube, err := kubernetes.NewForConfig(controllers.BuiltinKindsConfig(rc))
	if err != nil {
		return nil, err
	}
	istio, err := istioclient.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &loadtest.KubeInputs{Scenario: scn, Kube: kube, Istio: istio}, nil
}

func openLog(path string, fallback io.Writer) (io.Writer, func(), error) {
	if path == "" {
		return fallback, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("--control-plane-log: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}

func writeReportFile(path string, r *loadtest.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--json-out: %w", err)
	}
	if err := r.WriteJSON(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("--json-out: %w", err)
	}
	return f.Close()
}
