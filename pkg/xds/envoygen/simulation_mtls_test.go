package envoygen

import (
	"testing"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// Mutual TLS between sidecars, both halves: what the client's cluster
// uses towards each endpoint (auto mTLS), and what the server's inbound
// listener does with each kind of connection under each PeerAuthentication
// mode. The expectations are Istio's documented behaviour: PERMISSIVE takes
// both, STRICT only mutual TLS, DISABLE only plaintext; auto mTLS sends
// mutual TLS to workloads with sidecars unless their namespace disables it.
func TestSimulationMutualTLS(t *testing.T) {
	sims := simulations(t, "mtls")

	t.Run("client side: auto mTLS per endpoint", func(t *testing.T) {
		cases := []struct {
			name, cluster, endpoint, want string
		}{
			{"a workload with a sidecar gets mutual TLS", "outbound|80||web.shop.svc.cluster.local", "10.2.0.1:8080", tlsModeIstioMatch},
			{"one without a sidecar gets plaintext", "outbound|80||web.shop.svc.cluster.local", "10.2.0.5:8080", "plaintext"},
			{"TCP ports too", "outbound|3306||web.shop.svc.cluster.local", "10.2.0.1:3306", tlsModeIstioMatch},
			{"a STRICT namespace's workloads", "outbound|80||db.vault.svc.cluster.local", "10.2.0.2:8080", tlsModeIstioMatch},
			{"a namespace that disables mTLS gets plaintext, sidecar or not", "outbound|80||old.legacy.svc.cluster.local", "10.2.0.3:8080", "plaintext"},
			// As Istio's EDS does: a sidecar whose own policy is DISABLE
			// passes TLS to the application untouched.
			{"a workload whose policy disables mTLS gets plaintext", "outbound|80||plain.shop.svc.cluster.local", "10.2.0.6:8080", "plaintext"},
			{"a port-level DISABLE on the workload's port gets plaintext", "outbound|81||admin.shop.svc.cluster.local", "10.2.0.7:8081", "plaintext"},
			{"the workload's other ports keep mutual TLS", "outbound|80||admin.shop.svc.cluster.local", "10.2.0.7:8080", tlsModeIstioMatch},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got, err := sims["client"].TransportSocket(tc.cluster, tc.endpoint)
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("transport socket to %s = %q, want %q", tc.endpoint, got, tc.want)
				}
			})
		}
	})

	// An original-destination cluster (loadBalancer PASSTHROUGH) has no
	// endpoints to match a tlsMode on, so mutual TLS is all or nothing for
	// the cluster, as Istio infers it: mutual TLS when the service's
	// namespace (or mesh) mode is not DISABLE and every endpoint of the
	// port takes it, else plaintext; TLS settings of the rule still win.
	t.Run("client side: original-destination clusters", func(t *testing.T) {
		const tls = transportSocketTLS
		cases := []struct {
			name, cluster, address, want string
		}{
			{"STRICT, every endpoint has a sidecar", "outbound|80||ledger.vault.svc.cluster.local", "10.2.1.1:8080", tls},
			{"a subset of it", "outbound|80|all|ledger.vault.svc.cluster.local", "10.2.1.2:8080", tls},
			{"a port whose settings are not PASSTHROUGH keeps auto mTLS per endpoint", "outbound|81||ledger.vault.svc.cluster.local", "10.2.1.1:8081", tlsModeIstioMatch},
			{"PERMISSIVE, every endpoint has a sidecar", "outbound|80||catalog.shop.svc.cluster.local", "10.2.1.8:8080", tls},
			{"one endpoint without a sidecar: plaintext", "outbound|80||cache.vault.svc.cluster.local", "10.2.1.3:8080", "plaintext"},
			{"no endpoints: plaintext", "outbound|80||empty.vault.svc.cluster.local", "10.2.1.9:8080", "plaintext"},
			{"a namespace that disables mTLS: plaintext", "outbound|80||archive.legacy.svc.cluster.local", "10.2.1.7:8080", "plaintext"},
			{"an endpoint whose own policy disables mTLS: plaintext", "outbound|80||plain-direct.shop.svc.cluster.local", "10.2.0.6:8080", "plaintext"},
			{"the rule's ISTIO_MUTUAL wins over a missing sidecar", "outbound|80||batch.vault.svc.cluster.local", "10.2.1.5:8080", tls},
			{"the rule's DISABLE wins over STRICT", "outbound|80||audit.vault.svc.cluster.local", "10.2.1.6:8080", "plaintext"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				up, outcome, detail := sims["client"].Cluster(tc.cluster, xdstest.Request{})
				if up.Type != "ORIGINAL_DST" && tc.want != tlsModeIstioMatch {
					t.Fatalf("cluster %s is %s (%s %s), want ORIGINAL_DST", tc.cluster, up.Type, outcome, detail)
				}
				got, err := sims["client"].TransportSocket(tc.cluster, tc.address)
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("transport socket of %s = %q, want %q", tc.cluster, got, tc.want)
				}
			})
		}
	})

	// What a sidecar client sends: TLS with Istio's ALPN and its
	// certificate; what an application without a sidecar sends: plaintext,
	// or its own TLS without a certificate.
	mesh := func(ip string, port uint32) xdstest.Request {
		return xdstest.Request{Inbound: true, DestinationIP: ip, Port: port, TLS: true, ALPN: []string{"istio-http/1.1", "istio"}, ClientCertificate: true, Path: "/"}
	}
	plain := func(ip string, port uint32) xdstest.Request {
		return xdstest.Request{Inbound: true, DestinationIP: ip, Port: port, Path: "/"}
	}
	appTLS := func(ip string, port uint32) xdstest.Request {
		return xdstest.Request{Inbound: true, DestinationIP: ip, Port: port, TLS: true, ALPN: []string{"h2"}, Path: "/"}
	}
	type want struct {
		outcome    xdstest.Outcome
		cluster    string
		terminated bool
	}
	cases := []struct {
		name  string
		proxy string
		req   xdstest.Request
		want  want
	}{
		{"PERMISSIVE: mutual TLS is terminated", "web", mesh("10.2.0.1", 8080), want{xdstest.OutcomeRouted, "inbound|8080||", true}},
		{"PERMISSIVE: plaintext is accepted", "web", plain("10.2.0.1", 8080), want{xdstest.OutcomeRouted, "inbound|8080||", false}},
		{"PERMISSIVE: an HTTP port takes no TLS but the mesh's", "web", appTLS("10.2.0.1", 8080), want{outcome: xdstest.OutcomeNoListener}},
		{"PERMISSIVE: a TCP port passes the application's TLS through", "web", appTLS("10.2.0.1", 3306), want{xdstest.OutcomeRouted, "inbound|3306||", false}},
		{"PERMISSIVE: mutual TLS on a TCP port", "web", mesh("10.2.0.1", 3306), want{xdstest.OutcomeRouted, "inbound|3306||", true}},
		{"PERMISSIVE: a port of no service passes through", "web", plain("10.2.0.1", 9999), want{xdstest.OutcomeRouted, InboundPassthroughCluster, false}},
		{"PERMISSIVE: mutual TLS to a port of no service", "web", mesh("10.2.0.1", 9999), want{xdstest.OutcomeRouted, InboundPassthroughCluster, true}},

		{"STRICT: mutual TLS is terminated", "db", mesh("10.2.0.2", 8080), want{xdstest.OutcomeRouted, "inbound|8080||", true}},
		{"STRICT: plaintext finds no chain", "db", plain("10.2.0.2", 8080), want{outcome: xdstest.OutcomeNoListener}},
		{"STRICT: TLS without a client certificate is refused", "db", appTLS("10.2.0.2", 8080), want{outcome: xdstest.OutcomeTLSRefused}},
		{"STRICT: plaintext to a port of no service is refused too", "db", plain("10.2.0.2", 9999), want{outcome: xdstest.OutcomeNoListener}},

		{"DISABLE: plaintext is accepted", "old", plain("10.2.0.3", 8080), want{xdstest.OutcomeRouted, "inbound|8080||", false}},
		{"DISABLE: TLS is not terminated, it reaches the application", "old", mesh("10.2.0.3", 8080), want{xdstest.OutcomeRouted, "inbound|8080||", false}},

		{"workload PERMISSIVE over namespace STRICT: plaintext accepted", "api", plain("10.2.0.4", 8080), want{xdstest.OutcomeRouted, "inbound|8080||", false}},
		{"port-level STRICT on a port of no service: plaintext refused", "api", plain("10.2.0.4", 9000), want{outcome: xdstest.OutcomeNoListener}},
		{"port-level STRICT on a port of no service: mutual TLS passes", "api", mesh("10.2.0.4", 9000), want{xdstest.OutcomeRouted, InboundPassthroughCluster, true}},
		{"other ports of no service follow the workload's PERMISSIVE", "api", plain("10.2.0.4", 9001), want{xdstest.OutcomeRouted, InboundPassthroughCluster, false}},
	}
	for _, tc := range cases {
		t.Run("server side: "+tc.name, func(t *testing.T) {
			r := sims[tc.proxy].Route(tc.req)
			got := want{r.Outcome, r.Cluster, r.TLSTerminated}
			if got != tc.want {
				t.Errorf("got %+v, want %+v (listener %s, chain %s: %s)", got, tc.want, r.Listener, r.FilterChain, r.Detail)
			}
			if r.TLSTerminated && !r.ClientCertRequired {
				t.Errorf("chain %s terminates mutual TLS without requiring a client certificate", r.FilterChain)
			}
		})
	}
}
