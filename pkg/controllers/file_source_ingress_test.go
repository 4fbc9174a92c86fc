package controllers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestFileSourceIngressKinds loads Ingresses, IngressClasses and Secrets
// from files and follows edits and deletions of them.
func TestFileSourceIngressKinds(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ingress.yaml", ingressYAML)
	writeFile(t, dir, "class.yaml", ingressClassYAML)
	writeFile(t, dir, "secrets/all.yaml", tlsSecretYAML+"---\n"+istioSecretYAML+"---\n"+opaqueSecretYAML)
	writeFile(t, dir, "old-api.yaml", "apiVersion: networking.k8s.io/v1beta1\nkind: Ingress\nmetadata: {name: old}\nspec: {}\n")
	h := startFileSource(t, dir)

	shop := model.NamespacedName{Namespace: "ns", Name: "shop"}
	ing := h.store.Ingress(shop)
	if ing == nil || ing.ClassName != "istio" || len(ing.Rules) != 1 || len(ing.Rules[0].Paths) != 3 || ing.Revision == "" {
		t.Fatalf("ingress = %+v", ing)
	}
	if classes := h.store.IngressClasses(); len(classes) != 1 || !classes[0].IsDefault {
		t.Fatalf("classes = %+v", classes)
	}
	secretCert := func(name string) string {
		s := h.store.Secret(model.NamespacedName{Namespace: "ns", Name: name})
		if s == nil {
			return "<absent>"
		}
		return string(s.Cert)
	}
	for name, want := range map[string]string{"shop-cert": "tls-cert-pem", "generic-cert": "generic-cert-pem",
		"db-password": "<absent>"} {
		if got := secretCert(name); got != want {
			t.Errorf("secret %s cert = %q, want %q", name, got, want)
		}
	}
	// Only the removed networking.k8s.io/v1beta1 Ingress is refused.
	if got := h.errorCount("Ingress", ReasonUnknownKind); got != 1 {
		t.Errorf("unknown-kind errors for the v1beta1 Ingress = %v, want 1", got)
	}
	if got := seriesCount(h.metrics.ConfigErrors); got != 1 {
		t.Errorf("%d error series, want 1: %s", got, h.logs.String())
	}

	// Edits: a path changes, the certificate rotates.
	firstRevision := ing.Revision
	writeFile(t, dir, "ingress.yaml", strings.Replace(ingressYAML, "path: /cart", "path: /basket", 1))
	writeFile(t, dir, "secrets/all.yaml", strings.Replace(tlsSecretYAML, "dGxzLWNlcnQtcGVt", "bmV3LWNlcnQ=", 1)+"---\n"+
		istioSecretYAML)
	eventually(t, "edits applied", func() bool {
		ing := h.store.Ingress(shop)
		return ing != nil && ing.Rules[0].Paths[0].Path == "/basket" && ing.Revision != firstRevision &&
			secretCert("shop-cert") == "new-cert"
	})

	// Deletions: the class file goes, and a Secret leaves its file.
	if err := os.Remove(filepath.Join(dir, "class.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "secrets/all.yaml", istioSecretYAML)
	eventually(t, "deletions applied", func() bool {
		return len(h.store.IngressClasses()) == 0 && secretCert("shop-cert") == "<absent>"
	})
	if h.store.Ingress(shop) == nil || secretCert("generic-cert") != "generic-cert-pem" {
		t.Fatal("objects that stayed in the files were removed")
	}
	if err := os.Remove(filepath.Join(dir, "ingress.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ingress deleted", func() bool { return h.store.Ingress(shop) == nil })
}
