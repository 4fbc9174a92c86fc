package pushcontext

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestIngressTLS(t *testing.T) {
	good, other := newTestCert(t, "example.com"), newTestCert(t, "other.example.com")
	a80 := cluster("web", "a", 80)
	route := func(host, name string) string { return host + " Prefix / -> " + a80 + " (web/" + name + ")" }
	hostRule := func(host string) model.IngressRule {
		return rule(host, path(model.PathTypePrefix, "/", toPort("a", 80)))
	}
	secrets := func(list ...*model.Secret) func(model.Store) {
		return func(s model.Store) {
			for _, sec := range list {
				s.UpsertSecret(sec)
			}
		}
	}
	cases := []struct {
		name      string
		ingresses []*model.Ingress
		extra     func(model.Store)
		want      []string
		// wantProblems match by prefix, since some end with a crypto/tls
		// error whose wording is not ours.
		wantProblems map[string][]string
		// wantSecrets are the names Secret() returns a Secret for, among
		// every Secret in the store.
		wantSecrets []string
	}{
		{
			name:        "an entry with hosts and a valid Secret",
			ingresses:   []*model.Ingress{withTLS(ing("web", "x", 0, hostRule("example.com")), "cert", "example.com")},
			extra:       secrets(tlsSecret("web", "cert", good), tlsSecret("web", "unused", other)),
			want:        []string{"ports 8080 8443", route("example.com", "x"), "tls example.com kubernetes://web/cert (web/x)"},
			wantSecrets: []string{"web/cert"},
		},
		{
			name: "an entry without hosts takes the rule hosts, or any host without rules",
			ingresses: []*model.Ingress{
				withTLS(ing("web", "rules", 0, hostRule("b.example.com"), hostRule("a.example.com"), hostRule("a.example.com")), "cert"),
				withTLS(withDefault(ing("web", "bare", 1), toPort("a", 80)), "cert"),
			},
			extra: secrets(tlsSecret("web", "cert", good)),
			want: []string{"ports 8080 8443",
				route("a.example.com", "rules"), route("b.example.com", "rules"), route("*", "bare"),
				"tls * kubernetes://web/cert (web/bare)",
				"tls a.example.com,b.example.com kubernetes://web/cert (web/rules)",
			},
			wantProblems: map[string][]string{"web/rules": {
				`host "a.example.com" Prefix path "/": already routed by an earlier path of this Ingress; dropped`,
			}},
			wantSecrets: []string{"web/cert"},
		},
		{
			name: "a bad entry drops only itself",
			ingresses: []*model.Ingress{withTLS(withTLS(withTLS(withTLS(withTLS(withTLS(
				ing("web", "x", 0, hostRule("ok.example.com")),
				"cert", "ok.example.com"),
				"missing", "missing.example.com"),
				"keyless", "keyless.example.com"),
				"garbage", "garbage.example.com"),
				"mismatched", "mismatched.example.com"),
				"", "nameless.example.com")},
			extra: secrets(
				tlsSecret("web", "cert", good),
				&model.Secret{Namespace: "web", Name: "keyless", Cert: good.cert},
				&model.Secret{Namespace: "web", Name: "garbage", Cert: []byte("not PEM"), PrivateKey: []byte("not PEM")},
				&model.Secret{Namespace: "web", Name: "mismatched", Cert: good.cert, PrivateKey: other.key},
			),
			want: []string{"ports 8080 8443", route("ok.example.com", "x"), "tls ok.example.com kubernetes://web/cert (web/x)"},
			wantProblems: map[string][]string{"web/x": {
				"TLS for hosts garbage.example.com: secret web/garbage does not hold a valid certificate and key: ",
				"TLS for hosts keyless.example.com: secret web/keyless has no certificate or no private key (tls.crt, tls.key); TLS entry dropped",
				"TLS for hosts mismatched.example.com: secret web/mismatched does not hold a valid certificate and key: ",
				"TLS for hosts missing.example.com: secret web/missing not found; TLS entry dropped",
				"TLS for hosts nameless.example.com: no secretName; TLS entry dropped",
			}},
			wantSecrets: []string{"web/cert"},
		},
		{
			name: "a Secret is looked up in the Ingress's namespace",
			ingresses: []*model.Ingress{
				withTLS(ing("web", "x", 0, hostRule("example.com")), "cert", "example.com"),
			},
			extra: secrets(tlsSecret("istio-system", "cert", good)),
			want:  []string{"ports 8080 8443", route("example.com", "x")},
			wantProblems: map[string][]string{"web/x": {
				"TLS for hosts example.com: secret web/cert not found; TLS entry dropped",
			}},
		},
		{
			name: "the oldest Ingress serves a TLS host; the same Secret again is quiet, another is reported",
			ingresses: []*model.Ingress{
				withTLS(ing("web", "third", 3, hostRule("a.example.com")), "other", "a.example.com"),
				withTLS(ing("web", "second", 2, hostRule("a.example.com"), hostRule("b.example.com")), "cert", "a.example.com", "b.example.com"),
				withTLS(withTLS(ing("web", "first", 1, hostRule("a.example.com")), "cert", "a.example.com"), "other", "a.example.com"),
			},
			extra: secrets(tlsSecret("web", "cert", good), tlsSecret("web", "other", other)),
			want: []string{"ports 8080 8443",
				route("a.example.com", "first"), route("b.example.com", "second"),
				"tls a.example.com kubernetes://web/cert (web/first)",
				"tls b.example.com kubernetes://web/cert (web/second)",
			},
			wantProblems: map[string][]string{
				"web/first":  {`TLS host "a.example.com" is already served by an earlier TLS entry of this Ingress with secret web/cert; dropped from secret web/other`},
				"web/second": {`host "a.example.com" Prefix path "/": already routed by web/first; dropped`},
				"web/third": {
					`TLS host "a.example.com" is already served by web/first with secret web/cert; dropped from secret web/other`,
					`host "a.example.com" Prefix path "/": already routed by web/first; dropped`,
				},
			},
			wantSecrets: []string{"web/cert"},
		},
		{
			// The gateway picks one certificate per SNI name, which is
			// case-insensitive: the older Ingress keeps the host.
			name: "TLS hosts differing only in case are one host",
			ingresses: []*model.Ingress{
				withTLS(ing("web", "second", 2, hostRule("a.example.com")), "other", "a.example.com"),
				withTLS(ing("web", "first", 1, hostRule("A.Example.com")), "cert", "A.EXAMPLE.com"),
			},
			extra: secrets(tlsSecret("web", "cert", good), tlsSecret("web", "other", other)),
			want: []string{"ports 8080 8443",
				route("a.example.com", "first"),
				"tls a.example.com kubernetes://web/cert (web/first)",
			},
			wantProblems: map[string][]string{
				"web/second": {
					`TLS host "a.example.com" is already served by web/first with secret web/cert; dropped from secret web/other`,
					`host "a.example.com" Prefix path "/": already routed by web/first; dropped`,
				},
			},
			wantSecrets: []string{"web/cert"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := ingressStore(tc.ingresses, tc.extra)
			pc := Build(store, testOpts, nil, nil)
			g := pc.IngressGateway()
			if diff := cmp.Diff(tc.want, describeGateway(g)); diff != "" {
				t.Errorf("gateway (-want +got):\n%s", diff)
			}
			got := problemsByName(pc.IngressProblems())
			if !problemPrefixesMatch(tc.wantProblems, got) {
				t.Errorf("problems:\n got %q\nwant %q (as prefixes)", got, tc.wantProblems)
			}
			var gotSecrets []string
			for _, name := range []string{"web/cert", "web/unused", "web/keyless", "web/garbage", "web/mismatched", "web/other", "istio-system/cert"} {
				ns, n, _ := strings.Cut(name, "/")
				sec := pc.Secret(model.NamespacedName{Namespace: ns, Name: n})
				if sec == nil {
					continue
				}
				if sec != store.Secret(model.NamespacedName{Namespace: ns, Name: n}) {
					t.Errorf("Secret(%s) is not the store's Secret", name)
				}
				gotSecrets = append(gotSecrets, name)
			}
			if diff := cmp.Diff(tc.wantSecrets, gotSecrets); diff != "" {
				t.Errorf("Secret() serves (-want +got):\n%s", diff)
			}
			if g != nil {
				for _, h := range g.TLS {
					if h.SecretName != IngressSecretName(h.Secret.Namespace, h.Secret.Name) || pc.Secret(h.Secret) == nil {
						t.Errorf("TLS host %v names secret %s / %v that Secret() does not serve", h.Hosts, h.SecretName, h.Secret)
					}
				}
			}
		})
	}
}

// problemPrefixesMatch compares problem lists per Ingress, where want holds
// prefixes of got.
func problemPrefixesMatch(want, got map[string][]string) bool {
	if len(want) != len(got) {
		return false
	}
	for name, w := range want {
		g := got[name]
		if len(w) != len(g) {
			return false
		}
		for i := range w {
			if !strings.HasPrefix(g[i], w[i]) {
				return false
			}
		}
	}
	return true
}

func TestIngressSecretName(t *testing.T) {
	if got := IngressSecretName("web", "cert"); got != "kubernetes://web/cert" {
		t.Errorf("IngressSecretName = %q", got)
	}
}
