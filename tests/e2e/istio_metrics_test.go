package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// prometheusAccept is the Accept header Prometheus 3 scrapes with by
// default. The control plane answers it as istiod does, in the classic text
// format, where a counter keeps its name: pilot_xds_pushes, never
// pilot_xds_pushes_total, which an OpenMetrics answer would force.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8," +
	"application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5," +
	"text/plain;version=0.0.4;q=0.4,*/*;q=0.1"

// istioMetric is what the README claims of one of istiod's metrics: its
// name, type, label names and histogram buckets, as istiod exposes them on
// 15014 (istio/istio pilot/pkg/xds/monitoring.go, pkg/xds/monitoring.go,
// pilot/pkg/config/kube/crdclient/metrics.go,
// pilot/pkg/serviceregistry/kube/controller/controller.go).
type istioMetric struct {
	name    string
	kind    dto.MetricType
	labels  []string
	buckets []float64
}

var istioMetrics = []istioMetric{
	{"pilot_xds_pushes", dto.MetricType_COUNTER, []string{"type"}, nil},
	{"pilot_proxy_convergence_time", dto.MetricType_HISTOGRAM, nil, []float64{.1, .5, 1, 3, 5, 10, 20, 30}},
	{"pilot_xds", dto.MetricType_GAUGE, []string{"version"}, nil},
	{"pilot_total_xds_rejects", dto.MetricType_COUNTER, []string{"type"}, nil},
	{"pilot_xds_push_time", dto.MetricType_HISTOGRAM, []string{"type"}, []float64{.01, .1, .5, 1, 3, 5, 10, 20, 30}},
	{"pilot_xds_config_size_bytes", dto.MetricType_HISTOGRAM, []string{"type"}, []float64{1, 10000, 1000000, 4000000, 10000000, 40000000}},
	{"pilot_k8s_cfg_events", dto.MetricType_COUNTER, []string{"event", "type"}, nil},
	{"pilot_k8s_reg_events", dto.MetricType_COUNTER, []string{"event", "type"}, nil},
	{"pilot_services", dto.MetricType_GAUGE, nil, nil},
	{"pilot_push_triggers", dto.MetricType_COUNTER, []string{"type"}, nil},
	{"pilot_debounce_time", dto.MetricType_HISTOGRAM, nil, []float64{.01, .1, .5, 1, 3, 5, 10, 20, 30}},
	{"pilot_pushcontext_init_seconds", dto.MetricType_HISTOGRAM, nil, []float64{.01, .1, .5, 1, 3, 5}},
	{"pilot_xds_send_time", dto.MetricType_HISTOGRAM, nil, []float64{.01, .1, 1, 3, 5, 10, 20, 30}},
	{"pilot_xds_write_timeout", dto.MetricType_COUNTER, nil, nil},
	{"pilot_total_xds_internal_errors", dto.MetricType_COUNTER, nil, nil},
}

// versionedSidecarNode is a sidecar of namespace ns whose agent says it is
// Istio version.
func versionedSidecarNode(ns, pod, ip, version string) *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{
		"NAMESPACE": ns, "INSTANCE_IPS": ip, "ISTIO_VERSION": version, "LABELS": map[string]any{"app": pod},
	})
	return &corev3.Node{Id: nodeID(ip, pod, ns), Metadata: meta}
}

// TestIstioMetricsOnTheMonitoringPort drives `pilot discovery` on a real API
// server with Envoy-semantics clients of both ADS variants and a NACK on the
// wire, then scrapes the monitoring port as Prometheus does, and checks that
// istiod's metrics are there with istiod's names, types, labels and
// buckets, and that they counted what happened.
func TestIstioMetricsOnTheMonitoringPort(t *testing.T) {
	t.Parallel()
	m := newKubeMesh(t)
	fx := fixtures{NS: "istio-metrics", IP: "10.244.1.10", Host: "echo.istio-metrics.svc.cluster.local"}
	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "service", fx.render(serviceYAML))
	m.apply(t, "slice-a", fx.render(sliceYAML, "echo-a", 7001))
	m.apply(t, "rule", fx.render(lbRuleYAML("LEAST_REQUEST")))
	cp := startControlPlane(t, m)

	echo := "outbound|7070||" + fx.Host
	sotw := xdstest.DialEnvoyClient(t, cp.xdsAddr, versionedSidecarNode(fx.NS, "client-0", "10.244.0.7", "1.24.2"), xdstest.SotW)
	delta := xdstest.DialEnvoyClient(t, cp.xdsAddr, versionedSidecarNode(fx.NS, "client-1", "10.244.0.8", "1.25.0"), xdstest.Delta)
	lb := func(policy clusterv3.Cluster_LbPolicy) func(xdstest.Snapshot) error {
		return func(s xdstest.Snapshot) error {
			c := s.Clusters[echo]
			if c == nil {
				return fmt.Errorf("no cluster %s", echo)
			}
			if c.GetLbPolicy() != policy {
				return fmt.Errorf("%s lb policy %v, want %v", echo, c.GetLbPolicy(), policy)
			}
			if len(s.Routes) == 0 {
				return fmt.Errorf("no routes yet")
			}
			return nil
		}
	}
	for _, c := range []*xdstest.EnvoyClient{sotw, delta} {
		c.RequireWarm(warmBound, lb(clusterv3.Cluster_LEAST_REQUEST))
	}

	// A config change, then an endpoint change: each is a push, which the
	// clients follow.
	m.apply(t, "rule", fx.render(lbRuleYAML("ROUND_ROBIN")))
	for _, c := range []*xdstest.EnvoyClient{sotw, delta} {
		c.RequireWarm(warmBound, lb(clusterv3.Cluster_ROUND_ROBIN))
	}
	m.apply(t, "slice-b", fx.render(sliceYAML, "echo-b", 7002))
	for _, c := range []*xdstest.EnvoyClient{sotw, delta} {
		c.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
			if n := endpointCount(s.Endpoints[echo]); n != 2 {
				return fmt.Errorf("%s has %d endpoints, want 2", echo, n)
			}
			return nil
		})
	}

	// A proxy rejects a response: a NACK on the wire.
	stream := openADS(t, cp)
	cds := fetchNoClose(t, stream, observerNode(fx.NS), clusterType)
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: clusterType, ResponseNonce: cds.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: "rejected by the test"}}); err != nil {
		t.Fatal(err)
	}

	var families map[string]*dto.MetricFamily
	waitFor(t, 30*time.Second, "the NACK and the last push in the metrics", func() error {
		families = scrape(t, cp)
		if got := sample(families, "pilot_total_xds_rejects", "type", "cds"); got != 1 {
			return fmt.Errorf("pilot_total_xds_rejects{type=cds} = %v, want 1", got)
		}
		if got := sample(families, "pilot_push_triggers", "type", "endpoint"); got < 1 {
			return fmt.Errorf("pilot_push_triggers{type=endpoint} = %v, want the EndpointSlice", got)
		}
		return nil
	})

	// Names, types, labels and buckets, as istiod exposes them.
	for _, want := range istioMetrics {
		f := families[want.name]
		if f == nil {
			t.Errorf("%s: not exposed", want.name)
			continue
		}
		if f.GetType() != want.kind {
			t.Errorf("%s: type %v, want %v", want.name, f.GetType(), want.kind)
		}
		for _, s := range f.GetMetric() {
			var names []string
			for _, l := range s.GetLabel() {
				names = append(names, l.GetName())
			}
			slices.Sort(names)
			if !slices.Equal(names, want.labels) {
				t.Errorf("%s: labels %v, want %v", want.name, names, want.labels)
				break
			}
			if want.kind != dto.MetricType_HISTOGRAM {
				continue
			}
			var bounds []float64
			for _, b := range s.GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			// Every histogram ends with le="+Inf", istiod's too.
			if wantBounds := append(slices.Clone(want.buckets), math.Inf(1)); !slices.Equal(bounds, wantBounds) {
				t.Errorf("%s: buckets %v, want %v", want.name, bounds, wantBounds)
				break
			}
		}
	}
	for name := range families {
		if strings.HasPrefix(name, "pilot_") && !slices.ContainsFunc(istioMetrics, func(m istioMetric) bool { return m.name == name }) {
			t.Errorf("%s is exposed but not claimed (add it to the README's table and to this test)", name)
		}
	}

	// What they counted.
	atLeast := func(what string, got, want float64) {
		t.Helper()
		if got < want {
			t.Errorf("%s = %v, want at least %v", what, got, want)
		}
	}
	for _, typ := range []string{"cds", "eds", "lds", "rds"} {
		atLeast("pilot_xds_pushes{type="+typ+"}", sample(families, "pilot_xds_pushes", "type", typ), 2)
		atLeast("pilot_xds_push_time{type="+typ+"} count", sample(families, "pilot_xds_push_time", "type", typ), 2)
		atLeast("pilot_xds_config_size_bytes{type="+typ+"} count", sample(families, "pilot_xds_config_size_bytes", "type", typ), 2)
	}
	for _, version := range []string{"1.24.2", "1.25.0"} {
		if got := sample(families, "pilot_xds", "version", version); got != 1 {
			t.Errorf("pilot_xds{version=%s} = %v, want 1 connected client", version, got)
		}
	}
	// The objects applied before the start are in the first push context
	// and trigger nothing; the rule's change after it does.
	atLeast("pilot_push_triggers{type=config}", sample(families, "pilot_push_triggers", "type", "config"), 1)
	if got := sample(families, "pilot_push_triggers", "type", "service"); got != 0 {
		t.Errorf("pilot_push_triggers{type=service} = %v, want 0: the Service was there before the start", got)
	}
	atLeast("pilot_k8s_cfg_events{type=DestinationRule,event=add}",
		sample(families, "pilot_k8s_cfg_events", "type", "DestinationRule", "event", "add"), 1)
	atLeast("pilot_k8s_cfg_events{type=DestinationRule,event=update}",
		sample(families, "pilot_k8s_cfg_events", "type", "DestinationRule", "event", "update"), 1)
	for _, typ := range []string{"Services", "EndpointSlice", "Pods", "Namespaces"} {
		atLeast("pilot_k8s_reg_events{type="+typ+",event=add}", sample(families, "pilot_k8s_reg_events", "type", typ, "event", "add"), 1)
	}
	// Two pushes reached both clients.
	atLeast("pilot_proxy_convergence_time count", sample(families, "pilot_proxy_convergence_time"), 4)
	atLeast("pilot_debounce_time count", sample(families, "pilot_debounce_time"), 2)
	// The first build, and the one the rule change made.
	atLeast("pilot_pushcontext_init_seconds count", sample(families, "pilot_pushcontext_init_seconds"), 2)
	atLeast("pilot_xds_send_time count", sample(families, "pilot_xds_send_time"), sample(families, "pilot_xds_pushes", "type", "cds"))

	var summary struct {
		Counts struct {
			Services int `json:"services"`
		} `json:"counts"`
	}
	if code, body := cp.get(t, "/debug/pushcontext"); code != http.StatusOK || json.Unmarshal([]byte(body), &summary) != nil {
		t.Fatalf("/debug/pushcontext: %d %s", code, body)
	}
	if got := sample(families, "pilot_services"); got != float64(summary.Counts.Services) || got < 1 {
		t.Errorf("pilot_services = %v, want the push context's %d services", got, summary.Counts.Services)
	}

	// A client leaving is no longer counted.
	delta.Close()
	waitFor(t, 10*time.Second, "pilot_xds to drop", func() error {
		if got := sample(scrape(t, cp), "pilot_xds", "version", "1.25.0"); got != 0 {
			return fmt.Errorf("pilot_xds{version=1.25.0} = %v after the client left", got)
		}
		return nil
	})
}

// fetchNoClose sends one request on stream and returns its response,
// leaving the stream open for what follows.
func fetchNoClose(t *testing.T, stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient,
	node *corev3.Node, typeURL string,
) *discoveryv3.DiscoveryResponse {
	t.Helper()
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typeURL}); err != nil {
		t.Fatalf("send %s: %v", typeURL, err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("recv %s: %v", typeURL, err)
	}
	return resp
}

// scrape reads the monitoring port's /metrics over HTTP as Prometheus does
// and parses it.
func scrape(t *testing.T, cp *controlPlane) map[string]*dto.MetricFamily {
	t.Helper()
	addr := cp.srv.MonitoringAddr()
	if addr == nil {
		t.Fatal("no monitoring listener")
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", prometheusAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("scrape answered in %q; istiod answers Prometheus in the text format, where counters keep their names", ct)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse the scrape: %v\n%s", err, body)
	}
	return families
}

// sample is the value of the series of family name with the given label
// pairs (a histogram's sample count); 0 when there is none.
func sample(families map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	for _, m := range families[name].GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return 0
}
