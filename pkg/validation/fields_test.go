package validation

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/reflect/protoreflect"
	networking "istio.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// specOf decodes YAML as the sources and the webhook do: to JSON, then
// with numbers kept as written.
func specOf(t *testing.T, doc string) any {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func fieldMessages(err error) []string {
	var out []string
	for _, fe := range FieldErrors(err) {
		out = append(out, fe.Error())
	}
	return out
}

func TestCheckFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		md   protoreflect.MessageDescriptor
		spec string
		want []string
	}{{
		name: "a valid rule, with every kind of value",
		md:   DestinationRuleSpec,
		spec: `
host: reviews
exportTo: ["."]
trafficPolicy:
  connectionPool:
    tcp: {maxConnections: 10, connectTimeout: 30ms, tcpKeepalive: {time: 2h, probes: "3"}}
    http: {http2MaxRequests: 1000, maxRetries: null, idleTimeout: 1h}
  loadBalancer:
    simple: LEAST_REQUEST
    warmupDurationSecs: 10s
    localityLbSetting: {enabled: true, distribute: [{from: a/*, to: {"b/*": 100}}]}
  outlierDetection: {consecutive5xxErrors: 7, maxEjectionPercent: 50, minHealthPercent: 50}
  tls: {mode: 3}
  portLevelSettings:
  - port: {number: 80}
    loadBalancer: {consistent_hash: {httpHeaderName: x-user}}
subsets:
- name: v1
  labels: {version: v1}
`,
	}, {
		name: "unknown fields, with the nearest known name",
		md:   DestinationRuleSpec,
		spec: `
host: reviews
simpel: ROUND_ROBIN
trafficPolicy:
  conectionPool: {tcp: {maxConnections: 1}}
  somethingElse: 1
subsets:
- name: v1
  lables: {version: v1}
`,
		want: []string{
			"spec.simpel: unknown field",
			"spec.subsets[0].lables: unknown field (did you mean labels?)",
			"spec.trafficPolicy.conectionPool: unknown field (did you mean connectionPool?)",
			"spec.trafficPolicy.somethingElse: unknown field",
		},
	}, {
		name: "types, named by the field",
		md:   DestinationRuleSpec,
		spec: `
host: 42
exportTo: "."
trafficPolicy:
  connectionPool:
    tcp: {maxConnections: ten, connectTimeout: 5, tcpKeepalive: {probes: -1}}
    http: {http1MaxPendingRequests: 1.5, h2UpgradePolicy: UPGRADE, useClientProtocol: "yes"}
  outlierDetection: {consecutive5xxErrors: 4294967296, interval: soon, minHealthPercent: half}
  loadBalancer: {localityLbSetting: {enabled: 1}, warmup: {aggression: much}}
  tls: [SIMPLE]
`,
		want: []string{
			"spec.exportTo: want a list, got \".\"",
			"spec.host: want a string, got 42",
			"spec.trafficPolicy.connectionPool.http.http1MaxPendingRequests: want an integer, got 1.5",
			"spec.trafficPolicy.connectionPool.http.useClientProtocol: want true or false, got \"yes\"",
			"spec.trafficPolicy.connectionPool.tcp.connectTimeout: want a duration (such as \"5s\"), got 5",
			"spec.trafficPolicy.connectionPool.tcp.maxConnections: want an integer, got \"ten\"",
			"spec.trafficPolicy.connectionPool.tcp.tcpKeepalive.probes: want a non-negative integer, got -1",
			"spec.trafficPolicy.loadBalancer.localityLbSetting.enabled: want true or false, got 1",
			"spec.trafficPolicy.loadBalancer.warmup.aggression: want a number, got \"much\"",
			"spec.trafficPolicy.outlierDetection.consecutive5xxErrors: want an integer in 0..4294967295, got 4294967296",
			"spec.trafficPolicy.outlierDetection.interval: want a duration (such as \"5s\"), got \"soon\"",
			"spec.trafficPolicy.outlierDetection.minHealthPercent: want an integer, got \"half\"",
			"spec.trafficPolicy.tls: want an object, got a list",
		},
	}, {
		name: "enums, quoted once",
		md:   DestinationRuleSpec,
		spec: `
host: reviews
trafficPolicy:
  tls: {mode: ISTIO_MUTUALL}
  loadBalancer: {simple: true}
`,
		want: []string{
			"spec.trafficPolicy.loadBalancer.simple: want UNSPECIFIED, LEAST_CONN, RANDOM, PASSTHROUGH, ROUND_ROBIN or LEAST_REQUEST, got true",
			`spec.trafficPolicy.tls.mode: want DISABLE, SIMPLE, MUTUAL or ISTIO_MUTUAL, got "ISTIO_MUTUALL"`,
		},
	}, {
		name: "map keys and values of a PeerAuthentication",
		md:   PeerAuthenticationSpec,
		spec: `
selector: {matchLabels: {app: reviews, version: 2}}
mtls: {mode: STRICT}
portLevelMtls:
  "8080": {mode: DISABLE}
  http: {mode: PERMISSIVE}
  "9090": {mod: STRICT}
`,
		want: []string{
			"spec.portLevelMtls[9090].mod: unknown field (did you mean mode?)",
			"spec.portLevelMtls[http]: want an integer, got \"http\"",
			"spec.selector.matchLabels[version]: want a string, got 2",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFields(tc.md, specOf(t, tc.spec), "spec")
			if diff := cmp.Diff(tc.want, fieldMessages(err)); diff != "" {
				t.Errorf("problems (-want +got)\n%s", diff)
			}
			if err != nil && strings.Contains(err.Error(), `\"`) {
				t.Errorf("a message is escaped twice: %v", err)
			}
		})
	}
}

func TestCheckFieldsOneofs(t *testing.T) {
	for _, tc := range []struct {
		name, spec, wantErr string
	}{
		{name: "one policy", spec: "trafficPolicy: {loadBalancer: {simple: RANDOM, localityLbSetting: {enabled: true}}}"},
		{
			name:    "simple and consistent hash",
			spec:    "trafficPolicy: {loadBalancer: {simple: RANDOM, consistentHash: {useSourceIp: true}}}",
			wantErr: "spec.trafficPolicy.loadBalancer: consistentHash and simple are mutually exclusive",
		},
		{
			name:    "two hash keys in a subset's port settings",
			spec:    "subsets: [{name: a, trafficPolicy: {portLevelSettings: [{port: {number: 80}, loadBalancer: {consistentHash: {httpHeaderName: x, useSourceIp: true}}}]}}]",
			wantErr: "spec.subsets[0].trafficPolicy.portLevelSettings[0].loadBalancer.consistentHash: httpHeaderName and useSourceIp are mutually exclusive",
		},
		{
			name:    "ring hash and maglev, proto field names",
			spec:    "traffic_policy: {load_balancer: {consistent_hash: {use_source_ip: true, ring_hash: {}, maglev: {}}}}",
			wantErr: "spec.traffic_policy.load_balancer.consistent_hash: maglev and ring_hash are mutually exclusive",
		},
		{name: "null member ignored", spec: "trafficPolicy: {loadBalancer: {simple: RANDOM, consistentHash: null}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldMessages(CheckFields(DestinationRuleSpec, specOf(t, tc.spec), "spec"))
			var want []string
			if tc.wantErr != "" {
				want = []string{tc.wantErr}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("problems (-want +got)\n%s", diff)
			}
		})
	}
}

// TestCheckFieldsAgreesWithTheDecoder decodes what CheckFields accepts with
// the spec's own JSON decoder: a check that passed must never leave the
// decoder to fail.
func TestCheckFieldsAgreesWithTheDecoder(t *testing.T) {
	for _, doc := range []string{
		`{host: a, trafficPolicy: {connectionPool: {tcp: {maxConnections: "10", connectTimeout: 1m30s}}}}`,
		`{host: a, trafficPolicy: {tls: {mode: 2, sni: x}, outlierDetection: {minHealthPercent: "7"}, loadBalancer: {warmup: {aggression: "NaN"}}}}`,
		`{host: a, trafficPolicy: {loadBalancer: {warmupDurationSecs: 10s, simple: null}}}`,
		`{host: a, subsets: [{name: v1, labels: {version: v1}}], workload_selector: {match_labels: {app: a}}}`,
	} {
		spec := specOf(t, doc)
		if err := CheckFields(DestinationRuleSpec, spec, "spec"); err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		js, _ := json.Marshal(spec)
		var dr networking.DestinationRule
		if err := json.Unmarshal(js, &dr); err != nil {
			t.Errorf("%s: CheckFields accepted what the decoder refuses: %v", doc, err)
		}
	}
}
