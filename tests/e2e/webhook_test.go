package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/bootstrap"
	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// TestRevisionTagsMoveInjection runs two control-plane revisions, each with
// its own injector webhook that the real API server calls over TLS. Both
// share the one mesh CA of istio-system: each webhook's certificate chains
// to the root published in istio-ca-root-cert, and each control plane
// patches that root, and nothing else, into its injector's caBundle, though
// both take part in the one election of Ingress status writers, as the
// chart installs them (the caBundle writer is elected per revision). The
// revision tag "prod" then moves from 1-7-6 to 1-8-1, and
// Pods created in a namespace labelled istio.io/rev=prod follow it. Last,
// with a control plane stopped, a webhook that may fail blocks Pods with a
// clear error, and one that may not lets them through.
func TestRevisionTagsMoveInjection(t *testing.T) {
	t.Parallel()
	m := newKubeMesh(t)
	m.apply(t, "namespaces", revisionNamespacesYAML)
	old := startControlPlane(t, m, withRevision("1-7-6"), withIdentity("pilot-1-7-6"))
	current := startControlPlane(t, m, withRevision("1-8-1"), withIdentity("pilot-1-8-1"))
	m.apply(t, "injectors", injectorYAML("1-7-6", old.webhookURL(), "Fail")+"---\n"+injectorYAML("1-8-1", current.webhookURL(), "Fail"))
	root, _ := publishedRootTLS(t, m, "istio-system")
	for rev, cp := range map[string]*controlPlane{"1-7-6": old, "1-8-1": current} {
		waitFor(t, 30*time.Second, "the control plane to patch the mesh root into "+rev+"'s injector", func() error {
			return m.expectCABundle("istio-sidecar-injector-"+rev, root)
		})
		if err := cp.webhookChainVerifies(root); err != nil {
			t.Errorf("revision %s: %v", rev, err)
		}
	}

	manager := tags.NewManager(tags.Options{Kube: m.kube})
	ctx := context.Background()

	t.Run("tag prod points at 1-7-6", func(t *testing.T) {
		if _, err := manager.Set(ctx, "prod", "1-7-6", false); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "a Pod injected by 1-7-6", func() error {
			return m.expectInjectedBy(t, "prod-apps", "1-7-6")
		})
	})

	t.Run("moving prod to 1-8-1 moves new Pods", func(t *testing.T) {
		if _, err := manager.Set(ctx, "prod", "1-8-1", false); err == nil {
			t.Fatal("retargeting a tag without overwrite succeeded")
		}
		if _, err := manager.Set(ctx, "prod", "1-8-1", true); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "a Pod injected by 1-8-1", func() error {
			return m.expectInjectedBy(t, "prod-apps", "1-8-1")
		})
	})

	t.Run("an outage blocks Pods only where the webhook may fail", func(t *testing.T) {
		current.stop(t)
		out, err := m.createPod(t, "prod-apps")
		if err == nil || !strings.Contains(out, "failed calling webhook") {
			t.Fatalf("with failurePolicy Fail and the webhook down, creating a Pod gave %v: %s", err, out)
		}
		m.run(t, "", "patch", "mutatingwebhookconfiguration", "istio-revision-tag-prod", "--type=json", "-p",
			`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"},{"op":"replace","path":"/webhooks/1/failurePolicy","value":"Ignore"}]`)
		waitFor(t, 30*time.Second, "a Pod created while the webhook is down", func() error {
			out, err := m.createPod(t, "prod-apps")
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
	})
}

func withRevision(rev string) func(*bootstrap.Options) {
	return func(o *bootstrap.Options) {
		o.Revision = rev
		o.Webhook.ExtraCertNames = []string{"127.0.0.1"}
	}
}

func (cp *controlPlane) webhookURL() string { return "https://" + cp.srv.WebhookAddr() + "/inject" }

// expectCABundle checks that every webhook of the MutatingWebhookConfiguration
// name trusts exactly root.
func (m *kubeMesh) expectCABundle(name string, root []byte) error {
	c, err := m.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range c.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, root) {
			return fmt.Errorf("%s/%s has caBundle %q, want the mesh root", name, w.Name, w.ClientConfig.CABundle)
		}
	}
	return nil
}

// webhookChainVerifies connects to the webhook server as the API server does
// (by the URL's address) and verifies what it serves against root alone.
func (cp *controlPlane) webhookChainVerifies(root []byte) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(root) {
		return fmt.Errorf("no certificate in the root %q", root)
	}
	conn, err := tls.Dial("tcp", cp.srv.WebhookAddr(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		return fmt.Errorf("the webhook's serving chain does not verify against the mesh root: %w", err)
	}
	return conn.Close()
}

// createPod creates a Pod in ns with kubectl and returns its output.
func (m *kubeMesh) createPod(t *testing.T, ns string) (string, error) {
	t.Helper()
	m.pods++
	pod := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"app-%d","namespace":%q},`+
		`"spec":{"serviceAccountName":"default","containers":[{"name":"app","image":"example/app"}]}}`, m.pods, ns)
	cmd := m.command("create", "-o", "json", "-f", "-")
	cmd.Stdin = strings.NewReader(pod)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// expectInjectedBy creates a Pod in ns and checks which revision's
// injector gave it its sidecar.
func (m *kubeMesh) expectInjectedBy(t *testing.T, ns, rev string) error {
	t.Helper()
	out, err := m.createPod(t, ns)
	if err != nil {
		return fmt.Errorf("create pod: %v: %s", err, out)
	}
	var pod struct {
		Spec struct {
			Containers []struct {
				Name string `json:"name"`
				Env  []struct{ Name, Value string }
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(out), &pod); err != nil {
		return fmt.Errorf("decode pod: %v", err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != "istio-proxy" {
			continue
		}
		for _, e := range c.Env {
			if e.Name == "ISTIO_META_REVISION" {
				if e.Value != rev {
					return fmt.Errorf("injected by revision %s, want %s", e.Value, rev)
				}
				return nil
			}
		}
		return fmt.Errorf("istio-proxy has no ISTIO_META_REVISION")
	}
	return fmt.Errorf("no sidecar injected")
}

const revisionNamespacesYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: istio-system}
---
apiVersion: v1
kind: Namespace
metadata:
  name: prod-apps
  labels: {istio.io/rev: prod}
`

// injectorYAML is revision rev's injector as the chart installs it, but
// called by URL: the test API server has no Service to route through.
func injectorYAML(rev, url, failurePolicy string) string {
	return fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: istio-sidecar-injector-%[1]s
  labels: {app: sidecar-injector, istio.io/rev: "%[1]s"}
webhooks:
- name: rev.namespace.sidecar-injector.istio.io
  clientConfig: {url: "%[2]s"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  namespaceSelector:
    matchExpressions:
    - {key: istio.io/rev, operator: In, values: ["%[1]s"]}
    - {key: istio-injection, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: %[3]s
- name: rev.object.sidecar-injector.istio.io
  clientConfig: {url: "%[2]s"}
  rules: [{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}]
  namespaceSelector:
    matchExpressions:
    - {key: istio.io/rev, operator: DoesNotExist}
    - {key: istio-injection, operator: DoesNotExist}
  objectSelector:
    matchExpressions:
    - {key: sidecar.istio.io/inject, operator: NotIn, values: ["false"]}
    - {key: istio.io/rev, operator: In, values: ["%[1]s"]}
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: %[3]s
`, rev, url, failurePolicy)
}
