package xds

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// family returns the gathered family name, nil if it has no series.
func family(t testing.TB, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// series is the series of family name whose labels include labels (name,
// value pairs); nil if there is none.
func series(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	f := family(t, reg, name)
	for _, m := range f.GetMetric() {
		match := true
		for i := 0; i < len(labels); i += 2 {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}) {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// value reads a counter or gauge, and a histogram's count; 0 when absent.
func value(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	m := series(t, reg, name, labels...)
	switch {
	case m == nil:
		return 0
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s: unexpected metric type", name)
	return 0
}

// versionedNode is nodeFor(name) claiming Istio version.
func versionedNode(name, version string) *structpb.Struct {
	meta := nodeFor(name).GetMetadata()
	meta.Fields["ISTIO_VERSION"] = structpb.NewStringValue(version)
	return meta
}

func TestIstioMetricsFollowTheServer(t *testing.T) {
	// A quiet period long enough that a Service and its endpoints, stored
	// one after the other, always make one push, even when a loaded machine
	// holds the test up between the two writes.
	h := newHarness(t, harnessConfig{seed: seedAB, debounceAfter: time.Second})
	reg := h.reg
	node := nodeFor("client")
	node.Metadata = versionedNode("client", "1.24.2")
	c := h.sotwAs("client", node)

	cds := c.subscribe(ClusterType)
	c.ack(cds)
	lds := c.subscribe(ListenerType)
	c.ack(lds)
	c.expectQuiet("after subscribing")

	// Each response's size is the bytes of its resources, under both names.
	var cdsBytes int
	for _, r := range cds.GetResources() {
		cdsBytes += len(r.GetValue())
	}
	for _, name := range []string{"pilot_xds_config_size_bytes", "meshpilot_xds_response_size_bytes"} {
		h := series(t, reg, name, "type", "cds").GetHistogram()
		if h.GetSampleCount() != 1 || h.GetSampleSum() != float64(cdsBytes) || cdsBytes == 0 {
			t.Errorf("%s{type=cds}: %d responses, %v bytes; want 1 of %d", name, h.GetSampleCount(), h.GetSampleSum(), cdsBytes)
		}
	}
	if got := value(t, reg, "pilot_xds", "version", "1.24.2"); got != 1 {
		t.Errorf("pilot_xds{version=1.24.2} = %v, want 1", got)
	}
	for _, typ := range []string{"cds", "lds"} {
		if got := value(t, reg, "pilot_xds_pushes", "type", typ); got != 1 {
			t.Errorf("pilot_xds_pushes{type=%s} = %v, want 1", typ, got)
		}
		if got := value(t, reg, "pilot_xds_push_time", "type", typ); got != 1 {
			t.Errorf("pilot_xds_push_time{type=%s} count = %v, want 1", typ, got)
		}
	}
	// Two responses plus the barrier's probe answers.
	if got := value(t, reg, "pilot_xds_send_time"); got < 3 {
		t.Errorf("pilot_xds_send_time count = %v, want every send (at least 3)", got)
	}
	if got := value(t, reg, "pilot_services"); got != 2 {
		t.Errorf("pilot_services = %v, want 2", got)
	}
	initsBefore := value(t, reg, "pilot_pushcontext_init_seconds")
	if initsBefore < 1 {
		t.Errorf("pilot_pushcontext_init_seconds count = %v, want the first build", initsBefore)
	}
	if got := value(t, reg, "pilot_proxy_convergence_time"); got != 0 {
		t.Errorf("pilot_proxy_convergence_time count = %v before any push, want 0 (subscriptions are no push)", got)
	}

	// One change: one trigger, one debounced push, one build, and one
	// convergence for the proxy, however many types it was sent. (The seed
	// triggered too, before the server started.)
	servicesBefore := value(t, reg, "pilot_push_triggers", "type", "service")
	endpointsBefore := value(t, reg, "pilot_push_triggers", "type", "endpoint")
	addService(h.store, "c", "10.1.0.3")
	c.ack(c.expect(ClusterType))
	c.ack(c.expect(ListenerType))
	c.expectQuiet("after the change")
	if got := value(t, reg, "pilot_push_triggers", "type", "service") - servicesBefore; got != 1 {
		t.Errorf("pilot_push_triggers{type=service} = %v, want 1", got)
	}
	if got := value(t, reg, "pilot_push_triggers", "type", "endpoint") - endpointsBefore; got != 1 {
		t.Errorf("pilot_push_triggers{type=endpoint} = %v, want 1", got)
	}
	// Observed once the push is handed to the connections, which may have
	// sent it already.
	h.eventually("pilot_debounce_time", func() bool { return value(t, reg, "pilot_debounce_time") == 1 })
	if got := value(t, reg, "pilot_pushcontext_init_seconds") - initsBefore; got != 1 {
		t.Errorf("pilot_pushcontext_init_seconds count grew by %v, want 1", got)
	}
	h.eventually("pilot_proxy_convergence_time", func() bool { return value(t, reg, "pilot_proxy_convergence_time") == 1 })
	if got := value(t, reg, "meshpilot_proxy_convergence_seconds"); got != 2 {
		t.Errorf("meshpilot_proxy_convergence_seconds count = %v, want one per response (2)", got)
	}
	if got := value(t, reg, "pilot_services"); got != 3 {
		t.Errorf("pilot_services = %v, want 3", got)
	}

	// A NACK is a reject of its type.
	addService(h.store, "d", "10.1.0.4")
	nack(c, c.expect(ClusterType), cds.GetVersionInfo(), "bad cluster")
	c.expect(ListenerType)
	c.expectQuiet("after the NACK")
	if got := value(t, reg, "pilot_total_xds_rejects", "type", "cds"); got != 1 {
		t.Errorf("pilot_total_xds_rejects{type=cds} = %v, want 1", got)
	}
	if got := value(t, reg, "meshpilot_xds_nacks_total", "type", "cds"); got != 1 {
		t.Errorf("meshpilot_xds_nacks_total{type=cds} = %v, want 1", got)
	}

	c.stream.CloseSend()
	_ = c.streamError()
	h.eventually("pilot_xds to drop", func() bool { return value(t, reg, "pilot_xds", "version", "1.24.2") == 0 })
}

func TestIstioClientsGaugeByVersionOverDelta(t *testing.T) {
	h := newHarness(t, harnessConfig{seed: seedAB})
	c := h.delta("client")
	node := nodeFor("client")
	node.Metadata = versionedNode("client", "1.26.0")
	if err := c.stream.Send(&discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: ClusterType}); err != nil {
		t.Fatal(err)
	}
	c.sentNode = true
	c.expect(ClusterType)
	if got := value(t, h.reg, "pilot_xds", "version", "1.26.0"); got != 1 {
		t.Errorf("pilot_xds{version=1.26.0} = %v, want 1", got)
	}
	// A client that claims no version counts under the empty version, as
	// in istiod (Prometheus drops the empty label).
	d := h.sotw("plain")
	d.subscribe(ClusterType)
	if got := value(t, h.reg, "pilot_xds", "version", ""); got != 1 {
		t.Errorf("pilot_xds{version=\"\"} = %v, want 1", got)
	}
}

func TestIstioVersionLabelIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	for i := range 3 * maxIstioVersions {
		m.istioClients(fmt.Sprintf("1.%d.0", i)).Inc()
	}
	m.istioClients(string(make([]byte, maxIstioVersionLen+1))).Inc()
	f := family(t, reg, "pilot_xds")
	if got := len(f.GetMetric()); got != maxIstioVersions+1 {
		t.Fatalf("pilot_xds has %d series, want %d and %q", got, maxIstioVersions, istioVersionOther)
	}
	if got, want := value(t, reg, "pilot_xds", "version", istioVersionOther), float64(2*maxIstioVersions+1); got != want {
		t.Fatalf("pilot_xds{version=other} = %v, want %v", got, want)
	}
	// A known version keeps its own series.
	if m.istioClients("1.0.0") != m.istioClients("1.0.0") {
		t.Fatal("a known version resolved to another gauge")
	}
}

func TestPushTriggersByIstioReason(t *testing.T) {
	key := func(kind model.Kind, name string) model.ConfigKey {
		return model.ConfigKey{Kind: kind, Namespace: "default", Name: name}
	}
	req := func(keys ...model.ConfigKey) *model.PushRequest {
		r := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{}, Start: time.Now()}
		for _, k := range keys {
			r.ConfigsUpdated[k] = struct{}{}
		}
		return r
	}
	cases := []struct {
		name  string
		req   *model.PushRequest
		istio map[string]float64
		ours  map[string]float64
	}{
		{"forced", &model.PushRequest{Full: true}, map[string]float64{"global": 1}, map[string]float64{"forced": 1}},
		{"endpoints", &model.PushRequest{ConfigsUpdated: map[model.ConfigKey]struct{}{key(model.KindEndpoints, "a"): {}}},
			map[string]float64{"endpoint": 1}, map[string]float64{"Endpoints": 1}},
		{"service", req(key(model.KindService, "a")), map[string]float64{"service": 1}, map[string]float64{"Service": 1}},
		{"pod", req(key(model.KindWorkload, "p")), map[string]float64{"proxy": 1}, map[string]float64{"Workload": 1}},
		{"namespace", req(key(model.KindNamespace, "n")), map[string]float64{"namespace": 1}, map[string]float64{"Namespace": 1}},
		{"secret", req(key(model.KindSecret, "s")), map[string]float64{"secret": 1}, map[string]float64{"Secret": 1}},
		// Config kinds are one reason, counted once per update.
		{"config kinds", req(key(model.KindDestinationRule, "r"), key(model.KindDestinationRule, "q"),
			key(model.KindPeerAuthentication, "p"), key(model.KindIngress, "i"), key(model.KindIngressClass, "c")),
			map[string]float64{"config": 1},
			map[string]float64{"DestinationRule": 1, "PeerAuthentication": 1, "Ingress": 1, "IngressClass": 1}},
		{"mixed", req(key(model.KindService, "a"), key(model.KindEndpoints, "a"), key(model.KindDestinationRule, "r")),
			map[string]float64{"service": 1, "endpoint": 1, "config": 1},
			map[string]float64{"Service": 1, "Endpoints": 1, "DestinationRule": 1}},
		{"source problems are config", req(key(model.KindSourceProblems, "file")),
			map[string]float64{"config": 1}, map[string]float64{"SourceProblems": 1}},
		{"unknown kind", req(key(model.Kind(200), "x")), map[string]float64{"unknown": 1}, map[string]float64{"Unknown": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s := NewServer(Options{Store: model.NewStore(), Metrics: NewMetrics(reg)})
			s.ConfigUpdate(tc.req)
			for _, check := range []struct {
				name, label string
				want        map[string]float64
			}{{"pilot_push_triggers", "type", tc.istio}, {"meshpilot_xds_push_triggers_total", "kind", tc.ours}} {
				got := map[string]float64{}
				for _, m := range family(t, reg, check.name).GetMetric() {
					if v := m.GetCounter().GetValue(); v != 0 {
						got[m.GetLabel()[0].GetValue()] = v
					}
					if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != check.label {
						t.Errorf("%s labels %v, want only %s", check.name, l, check.label)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(check.want) {
					t.Errorf("%s = %v, want %v", check.name, got, check.want)
				}
			}
		})
	}
}

func TestIstioSendErrorsByType(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	cds, sds := m.forType(ClusterType), m.forType(SecretType)
	cds.sendFailed(status.Error(codes.Canceled, "stream closed"))
	cds.sendFailed(status.Error(codes.Unavailable, "transport is closing"))
	if got := value(t, reg, "pilot_xds_pushes", "type", "cds_senderr"); got != 0 {
		t.Fatalf("a closing stream counted as a send error: %v", got)
	}
	cds.sendFailed(status.Error(codes.DeadlineExceeded, "send timed out"))
	cds.sendFailed(errors.New("broken"))
	if got := value(t, reg, "pilot_xds_pushes", "type", "cds_senderr"); got != 2 {
		t.Fatalf("pilot_xds_pushes{type=cds_senderr} = %v, want 2", got)
	}
	// istiod counts send errors of CDS, EDS, LDS and RDS only.
	sds.sendFailed(errors.New("broken"))
	if f := series(t, reg, "pilot_xds_pushes", "type", "sds_senderr"); f != nil {
		t.Fatalf("an SDS send error was counted: %v", f)
	}
}

func TestIstioMetricType(t *testing.T) {
	for typeURL, want := range map[string]string{
		ClusterType: "cds", EndpointType: "eds", ListenerType: "lds", RouteType: "rds", SecretType: "sds",
		AddressType: "wds", AuthorizationType: "wads", probeType: probeType,
	} {
		if got := istioMetricType(typeURL); got != want {
			t.Errorf("istioMetricType(%s) = %q, want %q", typeURL, got, want)
		}
	}
}

// Recording a push, its triggers and a send allocates nothing: the label
// children are resolved once.
func TestIstioMetricsDoNotAllocateOnTheHotPath(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	tm := m.forType(ClusterType)
	req := model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "a"}, time.Now())
	eds := model.NewPushRequest(model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: "a"}, time.Now())
	start := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		tm.pushed(time.Millisecond, 1024)
		tm.rejected()
		m.configUpdate(req)
		m.configUpdate(eds)
		m.sent(time.Millisecond)
		m.converged(start)
		m.debounced(start)
		m.built(time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per recording, want 0", allocs)
	}
}
