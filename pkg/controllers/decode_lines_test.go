package controllers

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestDecodeNamesFieldsAndLines: every error says where it is, in lines
// of the file (not of the document), and names the field.
func TestDecodeNamesFieldsAndLines(t *testing.T) {
	const svc = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\nspec:\n  ports: [{port: 80}]\n"
	for _, tc := range []struct {
		name, file string
		// objects are the names decoded; errs the errors, in order.
		objects []string
		errs    []string
	}{{
		name: "unknown fields of a DestinationRule, in the second document",
		file: svc + `---
# the rule
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: r, namespace: ns}
spec:
  host: s
  simpel: ROUND_ROBIN
  trafficPolicy:
    conectionPool: {tcp: {maxConnections: 1}}
`,
		objects: []string{"s"},
		errs: []string{`document 1 (DestinationRule ns/r, line 8) rejected (decode): line 13: spec.simpel: unknown field; ` +
			`line 15: spec.trafficPolicy.conectionPool: unknown field (did you mean connectionPool?)`},
	}, {
		name: "a value of the wrong type, and an enum, quoted once",
		file: `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: r}
spec:
  host: s
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: ten
    tls: {mode: ISTIO_MUTUALL}
`,
		errs: []string{`document 0 (DestinationRule default/r, line 1) rejected (decode): ` +
			`line 9: spec.trafficPolicy.connectionPool.tcp.maxConnections: want an integer, got "ten"; ` +
			`line 10: spec.trafficPolicy.tls.mode: want DISABLE, SIMPLE, MUTUAL or ISTIO_MUTUAL, got "ISTIO_MUTUALL"`},
	}, {
		name: "a PeerAuthentication with an unknown field",
		file: "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: ns}\nspec:\n  mtls: {mode: STRICT, strict: true}\n",
		errs: []string{"document 0 (PeerAuthentication ns/p, line 1) rejected (decode): line 5: spec.mtls.strict: unknown field"},
	}, {
		name:    "unknown fields of a Kubernetes kind, as kubectl --validate=strict",
		file:    svc + "---\n" + strings.Replace(svc, "name: s,", "name: t,", 1) + "  sessionAfinity: None\nstatus: {}\nextra: 1\n",
		objects: []string{"s"},
		errs: []string{"document 1 (Service ns/t, line 7) rejected (decode): line 12: spec.sessionAfinity: unknown field; " +
			"line 14: extra: unknown field"},
	}, {
		name: "a Kubernetes field of the wrong type",
		file: strings.Replace(svc, "port: 80", "port: eighty", 1),
		errs: []string{"document 0 (Service ns/s, line 1) rejected (decode): line 5: spec.ports.port: want int32, got string"},
	}, {
		name: "a JSON stream, one object per value, with lines",
		file: `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "ns"}}

{"apiVersion": "v1", "kind": "Service",
 "metadata": {"name": "b", "namespace": "ns"},
 "spec": {"ports": [{"port": 80, "nodePorts": 1}]}}
`,
		objects: []string{"a"},
		errs:    []string{"document 1 (Service ns/b, line 3) rejected (decode): line 5: spec.ports[0].nodePorts: unknown field"},
	}, {
		name:    "a kind meshpilot does not read, with a name of its own rules",
		file:    svc + "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: \"system:reader\"}\n",
		objects: []string{"s"},
		errs: []string{"document 1 (ClusterRole /system:reader, line 7) rejected (unknown_kind): " +
			"rbac.authorization.k8s.io/v1, Kind=ClusterRole is not a kind meshpilot reads"},
	}, {
		name: "a List stands for its items",
		file: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: ns}
- apiVersion: v1
  kind: Service
  metadata: {name: s, namespace: ns}
  spec: {portz: []}
`,
		objects: []string{"ns"},
		errs:    []string{"document 0 (Service ns/s, line 7) rejected (decode): line 10: spec.portz: unknown field"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := DecodeYAML([]byte(tc.file))
			var names, msgs []string
			for _, o := range objs {
				meta, err := objectMeta(o)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, meta.Name)
			}
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if diff := cmp.Diff(tc.objects, names); diff != "" {
				t.Errorf("objects (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tc.errs, msgs); diff != "" {
				t.Errorf("errors (-want +got)\n%s", diff)
			}
		})
	}
}

// TestDecodeFilesThatDoNotParse: a file that does not parse yields one
// *ParseError, at the line of the file where it is, and no objects.
func TestDecodeFilesThatDoNotParse(t *testing.T) {
	const svc = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: ns}\nspec:\n  ports: [{port: 80}]\n"
	badDoc := "apiVersion: v1\nkind: Service\nmetadata:\n  name: t\n   namespace: ns\n"
	// What YAML says of the bad document alone, with its line.
	_, alone := yaml.YAMLToJSON([]byte(badDoc))
	if alone == nil || !strings.Contains(alone.Error(), "line 5") {
		t.Fatalf("the bad document alone gives %v; want an error at its line 5", alone)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"YAML syntax, in the third document", svc + "---\n" + svc + "---\n" + badDoc,
			"line 17: yaml: mapping values are not allowed in this context"},
		{"a duplicate key", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n",
			`line 5: yaml: unmarshal errors: key "name" already set in map`},
		{"a document that is no object", svc + "---\n- a list\n", "line 7: document 1 is not an object"},
		{"no kind", svc + "---\napiVersion: v1\nmetadata: {name: x}\n", "line 7: document 1: apiVersion and kind are required"},
		{"no name", svc + "---\napiVersion: v1\nkind: Service\nmetadata: {namespace: ns}\n", "line 7: document 1: metadata.name is required"},
		{"no name in a List item", "kind: List\napiVersion: v1\nitems:\n- {apiVersion: v1, kind: Service}\n",
			"line 4: document 0 items[0]: metadata.name is required"},
		{"two lines run together into the kind", "apiVersion: v1\nkind: Service\n  - [unclosed\nmetadata: {name: s}\n",
			`line 1: document 0: "Service - [unclosed" of "v1" is not a kind of an API version`},
		{"two lines run together into the name", "apiVersion: v1\nkind: Service\nmetadata:\n  name: echo\n    - x\n",
			`line 1: document 0: "echo - x" is not a name of a Service`},
		{"a separator kubectl refuses", svc + "--- junk\n" + svc, `line 6: invalid document separator "--- junk"`},
		{"JSON syntax", "{\"apiVersion\": \"v1\",\n \"kind\": \"Service\",,\n}", "line 2: invalid JSON: invalid character ',' looking for beginning of object key string"},
		{"JSON cut short", "{\"apiVersion\": \"v1\",\n \"kind\": \"Service\"\n", "line 3: invalid JSON: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := DecodeYAML([]byte(tc.file))
			if len(objs) != 0 || len(errs) != 1 {
				t.Fatalf("got %d objects and errors %v; want one parse error", len(objs), errs)
			}
			var parseErr *ParseError
			if !errors.As(errs[0], &parseErr) {
				t.Fatalf("error %v is not a *ParseError", errs[0])
			}
			if got := errs[0].Error(); got != tc.want {
				t.Errorf("error %q, want %q", got, tc.want)
			}
		})
	}
}

// Comments, blank documents and a byte order mark change no line number.
func TestDecodeSkipsBlankDocuments(t *testing.T) {
	file := "\xef\xbb\xbf# header\n---\n# nothing here\n---\n\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {bad: 1}\n"
	_, errs := DecodeYAML([]byte(file))
	want := "document 0 (Service default/s, line 6) rejected (decode): line 9: spec.bad: unknown field"
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("errors %v, want %q", errs, want)
	}
	objs, errs := DecodeYAML([]byte("---\n---\n# only comments\n"))
	if len(objs) != 0 || len(errs) != 0 {
		t.Errorf("a file of blank documents gave %v, %v", objs, errs)
	}
	if _, errs := DecodeYAML([]byte(`{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "j"}}`)); len(errs) != 0 {
		t.Errorf("one JSON object: %v", errs)
	}
}
