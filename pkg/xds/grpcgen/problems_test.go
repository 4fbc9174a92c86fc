package grpcgen

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	networking "istio.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// droppedWorld is service echo (ports 7070, 7071) in namespace default with
// one DestinationRule, given as the YAML of its spec without the host.
func droppedWorld(t *testing.T, ruleYAML string) model.Store {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(ruleYAML))
	if err != nil {
		t.Fatal(err)
	}
	spec := &networking.DestinationRule{}
	if err := protojson.Unmarshal(js, spec); err != nil {
		t.Fatal(err)
	}
	spec.Host = "echo.default.svc.cluster.local"
	store := model.NewStore()
	store.UpsertService(&model.Service{Name: "echo", Namespace: "default", Hostname: spec.Host,
		Ports: []*model.Port{{Name: "grpc", Port: 7070, Protocol: model.ProtocolGRPC}, {Name: "grpc-admin", Port: 7071, Protocol: model.ProtocolGRPC}}})
	store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Name: "echo", Namespace: "default",
		CreationTime: time.Unix(1, 0), Spec: spec})
	return store
}

// generateAll serves every visible cluster and route to a proxy in ns.
func generateAll(t *testing.T, set *Set, push *pushcontext.PushContext, ns string) {
	t.Helper()
	proxy := &model.Proxy{Namespace: ns}
	for _, gen := range []Generator{set.Clusters, set.Routes} {
		if _, err := gen.Generate(proxy, push, &model.WatchedResource{Wildcard: true}, &model.PushRequest{Full: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// droppedFields lists the rule fields reported as not translated for gRPC.
func droppedFields(t *testing.T, push *pushcontext.PushContext) []string {
	t.Helper()
	var fields []string
	for _, p := range push.Summary().TranslationProblems {
		if p.Kind != model.KindDestinationRule.String() || p.Namespace != "default" || p.Name != "echo" {
			t.Errorf("problem reported against %s %s/%s", p.Kind, p.Namespace, p.Name)
		}
		rest, ok := strings.CutPrefix(p.Message, "proxyless gRPC: ")
		if !ok {
			t.Errorf("problem %q does not say it is about proxyless gRPC", p.Message)
		}
		field, _, _ := strings.Cut(rest, ": ")
		fields = append(fields, field)
	}
	slices.Sort(fields)
	return fields
}

func TestDroppedFieldsReported(t *testing.T) {
	tests := []struct {
		name string
		rule string
		want []string
	}{
		{"nothing set", `{}`, nil},
		{"outlier detection", `
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 5, interval: 10s, baseEjectionTime: 30s, maxEjectionPercent: 50}`,
			[]string{"outlierDetection"}},
		{"outlier detection of one subset", `
subsets:
- name: v1
  labels: {version: v1}
  trafficPolicy:
    outlierDetection: {consecutiveGatewayErrors: 3}`,
			[]string{"outlierDetection"}},
		{"outlier detection of one port", `
trafficPolicy:
  portLevelSettings:
  - port: {number: 7071}
    outlierDetection: {consecutive5xxErrors: 2}`,
			[]string{"outlierDetection"}},
		{"tls istio mutual is translated", `
trafficPolicy:
  tls: {mode: ISTIO_MUTUAL}`,
			nil},
		{"tls istio mutual with sni", `
trafficPolicy:
  tls: {mode: ISTIO_MUTUAL, sni: echo.example}`,
			[]string{"tls.sni"}},
		{"tls simple", `
trafficPolicy:
  tls: {mode: SIMPLE}`,
			[]string{"tls"}},
		{"tls mutual of one subset", `
subsets:
- name: v1
  labels: {version: v1}
  trafficPolicy:
    tls: {mode: MUTUAL, credentialName: client}`,
			[]string{"tls"}},
		{"tls disabled", `
trafficPolicy:
  tls: {mode: DISABLE}`,
			nil},
		{"locality", `
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute: [{from: "r1/*", to: {"r1/*": 80, "r2/*": 20}}]`,
			[]string{"loadBalancer.localityLbSetting"}},
		{"locality disabled", `
trafficPolicy:
  loadBalancer:
    localityLbSetting: {enabled: false}`,
			nil},
		{"load balancer grpc-go rejects", `
trafficPolicy:
  loadBalancer: {simple: RANDOM}`,
			[]string{"loadBalancer.simple"}},
		{"maglev", `
trafficPolicy:
  loadBalancer:
    consistentHash: {maglev: {}, httpHeaderName: x-user}`,
			[]string{"loadBalancer.consistentHash.maglev"}},
		{"cookie hash key", `
trafficPolicy:
  loadBalancer:
    consistentHash: {httpCookie: {name: session, ttl: 0s}}`,
			[]string{"loadBalancer.consistentHash.httpCookie"}},
		{"warmup", `
trafficPolicy:
  loadBalancer: {simple: ROUND_ROBIN, warmupDurationSecs: 30s}`,
			[]string{"loadBalancer.warmup"}},
		{"max requests alone", `
trafficPolicy:
  connectionPool:
    http: {http2MaxRequests: 100}`,
			nil},
		{"pool limits grpc-go lacks", `
trafficPolicy:
  connectionPool:
    tcp: {maxConnections: 10}
    http: {http2MaxRequests: 100, idleTimeout: 60s}`,
			[]string{"connectionPool.http", "connectionPool.tcp"}},
		{"tunnel", `
trafficPolicy:
  tunnel: {targetHost: proxy.example.com, targetPort: 8443}`,
			[]string{"tunnel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			push := pushcontext.Build(droppedWorld(t, tt.rule), testPushOptions(), nil, nil)
			generateAll(t, New(Options{}), push, "default")
			if got := droppedFields(t, push); !slices.Equal(got, tt.want) {
				t.Errorf("reported %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDroppedFieldLoggedOncePerRule builds the clusters of one rule for many
// namespaces, ports and subsets (each a cache miss): the fallback is one
// problem and one log line per push context, and a later push context that
// builds the clusters again reports it again.
func TestDroppedFieldLoggedOncePerRule(t *testing.T) {
	store := droppedWorld(t, `
trafficPolicy:
  loadBalancer: {simple: RANDOM}
subsets:
- {name: v1, labels: {version: v1}}
- {name: v2, labels: {version: v2}}`)
	var logs bytes.Buffer
	set := New(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	push := pushcontext.Build(store, testPushOptions(), nil, nil)
	for _, ns := range []string{"default", "a", "b"} {
		generateAll(t, set, push, ns)
	}
	if n := strings.Count(logs.String(), "RANDOM"); n != 1 {
		t.Errorf("the fallback was logged %d times, want once:\n%s", n, logs.String())
	}
	if got := droppedFields(t, push); !slices.Equal(got, []string{"loadBalancer.simple"}) {
		t.Errorf("reported %v", got)
	}

	store.UpsertService(&model.Service{Name: "other", Namespace: "default", Hostname: "other.default.svc.cluster.local",
		Ports: []*model.Port{{Name: "grpc", Port: 7070}}})
	next := pushcontext.Build(store, testPushOptions(), push, &model.PushRequest{Full: true,
		ConfigsUpdated: map[model.ConfigKey]struct{}{{Kind: model.KindService, Namespace: "default", Name: "other"}: {}}})
	generateAll(t, set, next, "default")
	if got := droppedFields(t, next); !slices.Equal(got, []string{"loadBalancer.simple"}) {
		t.Errorf("the next push context reported %v", got)
	}
}
