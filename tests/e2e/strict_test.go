package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/bootstrap"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// strictRuleYAML misspells two fields, as the issue that asked for strict
// input did: neither may pass unnoticed.
const strictRuleYAML = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: typos
  namespace: {{.NS}}
spec:
  host: {{.Host}}
  trafficPolicy:
    loadBalancer:
      simpel: LEAST_REQUEST
    conectionPool:
      tcp: {maxConnections: 10}
`

const typedRuleYAML = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: types
  namespace: {{.NS}}
spec:
  host: {{.Host}}
  trafficPolicy:
    connectionPool:
      tcp:
        maxConnections: ten
    tls: {mode: ISTIO_MUTUALL}
`

const strictPeerAuthYAML = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: typo
  namespace: {{.NS}}
spec:
  mtls: {mode: STRICT}
  portLevelMtl:
    8080: {mode: DISABLE}
`

// TestStrictInputConfigDir: `pilot discovery --config-dir` refuses what
// kubectl --validate=strict and Istio refuse, and says where: the field
// path, and the line counted from the start of the file. JSON files are
// read as kubectl reads them, Ingress problems are counted, and a source
// that fails is named once.
func TestStrictInputConfigDir(t *testing.T) {
	const ns = "strict-dir"
	host := fmt.Sprintf("echo.%s.svc.cluster.local", ns)
	fx := fixtures{NS: ns, IP: "10.0.0.1", Host: host}
	m := newDirMesh(t)
	m.apply(t, "namespace", fx.render(namespaceYAML))
	// The Service, Pods and a slice come as one JSON List, as `kubectl get
	// -o json` writes them; the rule that shapes the cluster as JSON too.
	writeDirFile(t, m.dir, "echo.json", yamlAsJSONList(t, fx.render(serviceYAML)+"---"+fx.render(sliceYAML, "echo-a", 7070)))
	writeDirFile(t, m.dir, "rule.json", yamlAsJSON(t, fx.render(ruleYAML)))
	// Three documents, the strict-failing rule last, so its lines are far
	// from those of its document.
	rules := fx.render(ruleYAML) + "---\n" + fx.render(strictRuleYAML)
	rules = strings.Replace(rules, "name: echo\n", "name: other\n", 1)
	rules = "apiVersion: v1\nkind: Namespace\nmetadata: {name: strict-dir-2}\n---\n" + rules
	m.apply(t, "rules", rules)
	m.apply(t, "types", fx.render(typedRuleYAML))
	m.apply(t, "peerauth", fx.render(strictPeerAuthYAML))
	m.apply(t, "ingress", fx.render(strictIngressYAML))
	cp := startControlPlane(t, m)

	problems := map[string]model.SourceProblem{}
	waitFor(t, 30*time.Second, "the problems in /debug/pushcontext", func() error {
		for _, p := range sourceProblemsOf(t, cp) {
			problems[p.Name] = p
		}
		if len(problems) < 3 {
			return fmt.Errorf("problems %+v", problems)
		}
		return nil
	})

	t.Run("unknown fields are refused, by path and file line", func(t *testing.T) {
		line := func(text string) int { return strings.Count(rules[:strings.Index(rules, text)], "\n") + 1 }
		want := model.SourceProblem{
			Source: "file", File: filepath.Join(m.dir, "rules.yaml"), Line: line("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: typos"),
			Kind: "DestinationRule", Namespace: ns, Name: "typos",
			Message: fmt.Sprintf("rejected (decode): line %d: spec.trafficPolicy.loadBalancer.simpel: unknown field (did you mean simple?); "+
				"line %d: spec.trafficPolicy.conectionPool: unknown field (did you mean connectionPool?)", line("simpel"), line("conectionPool")),
		}
		if got := problems["typos"]; got != want {
			t.Errorf("problem\n got %+v\nwant %+v", got, want)
		}
		if got := problems["typo"]; !strings.Contains(got.Message, "line 8: spec.portLevelMtl: unknown field (did you mean portLevelMtls?)") {
			t.Errorf("PeerAuthentication problem %+v", got)
		}
		if n := cp.metric(t, "meshpilot_config_errors_total", "kind", "DestinationRule"); n < 1 {
			t.Errorf("meshpilot_config_errors_total{kind=DestinationRule} = %v", n)
		}
	})

	t.Run("values of the wrong type name their field; enums are quoted once", func(t *testing.T) {
		want := `rejected (decode): line 11: spec.trafficPolicy.connectionPool.tcp.maxConnections: want an integer, got "ten"; ` +
			`line 12: spec.trafficPolicy.tls.mode: want DISABLE, SIMPLE, MUTUAL or ISTIO_MUTUAL, got "ISTIO_MUTUALL"`
		if got := problems["types"].Message; got != want {
			t.Errorf("problem\n got %s\nwant %s", got, want)
		}
	})

	t.Run("JSON files are read, as kubectl apply -f dir/ reads them", func(t *testing.T) {
		cluster := fmt.Sprintf("outbound|7070||%s", host)
		waitFor(t, 30*time.Second, "the JSON rule and endpoints", func() error {
			if err := lbPolicy(t, cp, ns, host, clusterv3.Cluster_LEAST_REQUEST); err != nil {
				return err
			}
			if n := endpointCount(loadAssignmentsOf(t, fetch(t, cp, ns, endpointType, cluster))[cluster]); n != 1 {
				return fmt.Errorf("%d endpoints from the JSON List, want 1", n)
			}
			return nil
		})
		// A JSON file that does not parse is reported at its line.
		writeDirFile(t, m.dir, "broken.json", "{\"apiVersion\": \"v1\",\n \"kind\": \"Service\",,\n}\n")
		p := waitForSourceProblem(t, cp, filepath.Join(m.dir, "broken.json"), "invalid JSON")
		if p.Line != 2 || !strings.Contains(p.Message, "invalid JSON") {
			t.Errorf("problem %+v, want invalid JSON at line 2", p)
		}
	})

	t.Run("YAML syntax errors are counted from the start of the file", func(t *testing.T) {
		// A brace left open in the third document.
		broken := strings.Replace(rules, "tcp: {maxConnections: 10}", "tcp: {maxConnections: 10", 1)
		m.apply(t, "rules", broken)
		p := waitForSourceProblem(t, cp, filepath.Join(m.dir, "rules.yaml"), "does not parse")
		// The brace is on the file's last line, far down in its third
		// document; the two rules before are served as they were.
		last := strings.Count(broken, "\n")
		want := model.SourceProblem{Source: "file", File: filepath.Join(m.dir, "rules.yaml"), Line: last, Message: fmt.Sprintf(
			"does not parse: line %d: yaml: did not find expected ',' or '}'; the 2 objects of its last version that did are served", last)}
		if p != want {
			t.Errorf("problem\n got %+v\nwant %+v", p, want)
		}
	})

	t.Run("Ingress problems are logged and counted without a cluster", func(t *testing.T) {
		waitFor(t, 30*time.Second, "meshpilot_ingress_problems", func() error {
			if n := cp.metric(t, "meshpilot_ingress_problems", "name", "shop"); n != 1 {
				return fmt.Errorf("meshpilot_ingress_problems{name=shop} = %v, want 1", n)
			}
			return nil
		})
	})
}

// strictIngressYAML routes to a Service that does not exist: a problem.
const strictIngressYAML = `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: shop
  namespace: {{.NS}}
  annotations: {kubernetes.io/ingress.class: istio}
spec:
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: missing, port: {number: 80}}}}
`

// A source that fails is named once: "file source: ...", not "source file:
// file source: ...".
func TestFailingSourceNamedOnce(t *testing.T) {
	notADir := filepath.Join(t.TempDir(), "config.yaml")
	writeDirFile(t, filepath.Dir(notADir), "config.yaml", "")
	opts := bootstrap.DefaultOptions()
	opts.ConfigDir = notADir
	opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	srv, err := bootstrap.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Run(ctx)
	if want := "file source: " + notADir + " is not a directory"; err == nil || err.Error() != want {
		t.Errorf("Run: %v, want %q", err, want)
	}
}

// TestStrictInputWebhook applies DestinationRules with kubectl to a real
// API server whose validating webhook is meshpilot's. The API server
// refuses unknown fields itself where the CRD's schema covers the spec;
// where it does not (a CRD that keeps unknown fields, as CRDs without a
// full schema do), meshpilot's webhook refuses them, naming each field,
// and names the field of a value of the wrong type.
func TestStrictInputWebhook(t *testing.T) {
	t.Parallel()
	const ns = "strict-webhook"
	m := newKubeMesh(t)
	fx := fixtures{NS: ns, Host: "echo." + ns + ".svc.cluster.local"}
	m.apply(t, "namespace", fx.render(namespaceYAML))
	startWithValidator(t, m)
	// The webhook answers once its certificate is issued: wait until an
	// invalid rule is refused by it.
	waitFor(t, 30*time.Second, "the webhook to answer", func() error {
		out, err := m.kubectlOutput(fx.render(invalidRuleYAML), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, `denied the request: DestinationRule "strict-webhook/invalid" is invalid`) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	t.Run("the API server refuses unknown fields where the schema covers the spec", func(t *testing.T) {
		out, err := m.kubectlOutput(fx.render(strictRuleYAML), "apply", "-f", "-")
		if err == nil || !strings.Contains(out, `unknown field "spec.trafficPolicy.conectionPool"`) {
			t.Errorf("kubectl apply: %v: %s", err, out)
		}
	})

	// As with a CRD that has no schema for the spec, or keeps its unknown
	// fields: the API server then neither prunes nor refuses them.
	m.run(t, "", "patch", "crd", "destinationrules.networking.istio.io", "--type=json", "-p", preserveSpecPatch(t, m))
	waitFor(t, 30*time.Second, "the patched CRD to let unknown fields through", func() error {
		out, err := m.kubectlOutput(fx.render(strictRuleYAML), "apply", "--dry-run=server", "-f", "-")
		if err == nil || !strings.Contains(out, "admission webhook") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})

	t.Run("the webhook refuses unknown fields, by path", func(t *testing.T) {
		out, err := m.kubectlOutput(fx.render(strictRuleYAML), "apply", "-f", "-")
		want := `denied the request: DestinationRule "strict-webhook/typos" is invalid: ` +
			`spec.trafficPolicy.conectionPool: unknown field (did you mean connectionPool?); ` +
			`spec.trafficPolicy.loadBalancer.simpel: unknown field (did you mean simple?)`
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("kubectl apply: %v: %s\nwant %s", err, out, want)
		}
	})

	t.Run("the webhook names the field of a wrong type, and quotes an enum once", func(t *testing.T) {
		out, err := m.kubectlOutput(fx.render(typedRuleYAML), "apply", "-f", "-")
		want := `spec.trafficPolicy.connectionPool.tcp.maxConnections: want an integer, got "ten"; ` +
			`spec.trafficPolicy.tls.mode: want DISABLE, SIMPLE, MUTUAL or ISTIO_MUTUAL, got "ISTIO_MUTUALL"`
		if err == nil || !strings.Contains(out, want) || strings.Contains(out, `\"`) {
			t.Errorf("kubectl apply: %v: %s\nwant %s", err, out, want)
		}
	})

	t.Run("a valid rule is admitted", func(t *testing.T) {
		if out, err := m.kubectlOutput(fx.render(ruleYAML), "apply", "-f", "-"); err != nil {
			t.Errorf("kubectl apply: %v: %s", err, out)
		}
	})

	t.Run("a taken webhook port is named once, with its flag", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		opts := bootstrap.DefaultOptions()
		opts.Kubeconfig = m.kubeconfig
		opts.XDSAddr, opts.HTTPAddr, opts.MonitoringAddr, opts.SecureXDSAddr = "127.0.0.1:0", "", "", "127.0.0.1:0"
		opts.Webhook.Addr = taken.Addr().String()
		_, err = bootstrap.New(opts)
		if err == nil || strings.Count(err.Error(), "webhook server:") != 1 || !strings.Contains(err.Error(), "--webhook-addr") {
			t.Errorf("bootstrap with the webhook port taken: %v; want one \"webhook server:\" and the flag", err)
		}
	})
}

// startWithValidator starts a control plane on m whose webhook serves
// 127.0.0.1, registers it as the chart's validator, and returns once the
// control plane has patched its mesh root into the caBundle. The webhook
// may still be fetching its own certificate then: callers wait for a first
// denial.
func startWithValidator(t *testing.T, m *kubeMesh) *controlPlane {
	t.Helper()
	cp := startControlPlane(t, m, func(o *bootstrap.Options) { o.Webhook.ExtraCertNames = []string{"127.0.0.1"} })
	m.apply(t, "validator", validatorYAML("https://"+cp.srv.WebhookAddr()+"/validate"))
	root, _ := publishedRootTLS(t, m, "istio-system")
	waitFor(t, 30*time.Second, "the mesh root in the validator's caBundle", func() error {
		c, err := m.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(),
			"istio-validator-istio-system", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !bytes.Equal(c.Webhooks[0].ClientConfig.CABundle, root) {
			return errors.New("caBundle not patched yet")
		}
		return nil
	})
	return cp
}

// validatorYAML is the revision's validator as the chart installs it, but
// called by URL: the test API server has no Service to route through.
func validatorYAML(url string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: istio-validator-istio-system
  labels: {istio.io/rev: default}
webhooks:
- name: rev.validation.istio.io
  clientConfig: {url: %q}
  rules:
  - {operations: [CREATE, UPDATE], apiGroups: [networking.istio.io], apiVersions: ["*"], resources: [destinationrules, virtualservices]}
  - {operations: [CREATE, UPDATE], apiGroups: [security.istio.io], apiVersions: ["*"], resources: [peerauthentications]}
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
`, url)
}

// preserveSpecPatch replaces the spec schema of every served version of the
// DestinationRule CRD with one that keeps unknown fields.
func preserveSpecPatch(t *testing.T, m *kubeMesh) string {
	t.Helper()
	out, err := m.kubectlOutput("", "get", "crd", "destinationrules.networking.istio.io", "-o", "jsonpath={.spec.versions[*].name}")
	if err != nil {
		t.Fatalf("reading the CRD: %v: %s", err, out)
	}
	var ops []string
	for i := range strings.Fields(out) {
		ops = append(ops, fmt.Sprintf(`{"op":"replace","path":"/spec/versions/%d/schema/openAPIV3Schema/properties/spec",`+
			`"value":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}`, i))
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// kubectlOutput runs kubectl and returns its output, failing or not.
func (m *kubeMesh) kubectlOutput(stdin string, args ...string) (string, error) {
	cmd := m.command(args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// yamlAsJSON turns one YAML document into indented JSON.
func yamlAsJSON(t *testing.T, doc string) string {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, js, "", "  "); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// yamlAsJSONList turns YAML documents into a JSON List of them, as
// `kubectl get -o json` writes several objects.
func yamlAsJSONList(t *testing.T, docs string) string {
	t.Helper()
	var items []json.RawMessage
	for _, doc := range strings.Split(docs, "\n---") {
		items = append(items, json.RawMessage(yamlAsJSON(t, doc)))
	}
	list, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(list)
}

func writeDirFile(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}
