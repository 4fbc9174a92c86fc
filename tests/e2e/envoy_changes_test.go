package e2e

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestEnvoyFollowsEachChange applies, one after another through the API
// server, each kind of change a running mesh sees, while Envoy-semantics
// clients (SotW and delta) of a sidecar and of the ingress gateway stay
// connected throughout, as real proxies do. After each change every client
// must end fully warm (nothing warming, nothing dangling, no NACK) with the
// new value in its active configuration: Envoy keeps serving the previous
// cluster or listener until the new one's dependencies arrive ("Resource
// warming", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol),
// so a change the server pushes incompletely never takes effect.
//
// The steps run in order on one world, because proxies that live through
// many changes are what the protocol must get right; each step's condition
// must fail before its change is applied, so that it is the change that
// makes it hold.
func TestEnvoyFollowsEachChange(t *testing.T) {
	t.Parallel()
	m := newKubeMesh(t)
	fx := fixtures{NS: "changes"}
	gw := ingressFixtures{NS: "changes-gw"}
	cert, key := testcerts.SelfSigned(t, "web.example.com")
	gw.Cert, gw.Key = string(cert), string(key)
	rotatedCert, rotatedKey := testcerts.SelfSigned(t, "web.example.com")

	m.apply(t, "namespace", fx.render(namespaceYAML))
	m.apply(t, "world", fx.render(changesWorldYAML))
	// kubectl apply ignores status; the kubelet would set the Pod IP, by
	// which the control plane finds the sidecar's Pod (INSTANCE_IPS).
	m.run(t, "", "patch", "pod", "web-0", "-n", fx.NS, "--subresource=status", "--type=merge",
		"-p", `{"status":{"phase":"Running","podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"}]}}`)
	m.apply(t, "rule", fx.render(lbRuleYAML("ROUND_ROBIN")))
	m.apply(t, "gateway-world", gw.render(t, ingressWorldYAML))
	cp := startControlPlane(t, m)

	echo := "echo.changes.svc.cluster.local"
	echoCluster := "outbound|8080||" + echo
	echoV1, echoV2 := "outbound|8080|v1|"+echo, "outbound|8080|v2|"+echo
	gwSecret := "kubernetes://changes-gw/web-tls"

	// The sidecar runs in r1/z1, where echo-a is; echo-b is in r2/z2.
	sidecar := sidecarNode(fx.NS)
	sidecar.Locality = &corev3.Locality{Region: "r1", Zone: "z1"}
	// The gateway proves its identity on 15012, where alone it is served
	// its certificate.
	gatewayConn := identityConn(t, m, cp, "istio-system", "istio-ingressgateway")
	var clients []*changeClient
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		clients = append(clients,
			&changeClient{proxy: "sidecar", mode: mode, EnvoyClient: xdstest.DialEnvoyClient(t, cp.xdsAddr, sidecar, mode)},
			&changeClient{proxy: "gateway", mode: mode, EnvoyClient: xdstest.NewEnvoyClient(t, gatewayConn, gatewayNode(), mode)})
	}
	for _, c := range clients {
		c.RequireWarm(warmBound, func(s xdstest.Snapshot) error {
			if c.proxy == "sidecar" {
				return clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
					return expect("lb_policy", c.GetLbPolicy(), clusterv3.Cluster_ROUND_ROBIN)
				})
			}
			return expect("certificate", secretCert(s, gwSecret), gw.Cert)
		})
	}

	steps := []struct {
		name    string
		apply   func(t *testing.T)
		sidecar func(xdstest.Snapshot) error // nil: only fully warm, no NACK
		gateway func(xdstest.Snapshot) error
	}{{
		name:  "DestinationRule load balancer",
		apply: func(t *testing.T) { m.apply(t, "rule", fx.render(lbRuleYAML("LEAST_REQUEST"))) },
		sidecar: func(s xdstest.Snapshot) error {
			return clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
				return expect("lb_policy", c.GetLbPolicy(), clusterv3.Cluster_LEAST_REQUEST)
			})
		},
	}, {
		name: "DestinationRule TLS",
		apply: func(t *testing.T) {
			m.apply(t, "rule", fx.render(echoRuleYAML(`tls: {mode: SIMPLE, sni: echo.example.com}`)))
		},
		sidecar: func(s xdstest.Snapshot) error {
			return clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
				tls := &tlsv3.UpstreamTlsContext{}
				if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(tls); err != nil {
					return fmt.Errorf("no UpstreamTlsContext: %v", err)
				}
				return expect("sni", tls.GetSni(), "echo.example.com")
			})
		},
	}, {
		name: "DestinationRule connection pool",
		apply: func(t *testing.T) {
			m.apply(t, "rule", fx.render(echoRuleYAML(`connectionPool: {tcp: {maxConnections: 7}}`)))
		},
		sidecar: func(s xdstest.Snapshot) error {
			return clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
				th := c.GetCircuitBreakers().GetThresholds()
				if len(th) == 0 {
					return fmt.Errorf("no circuit breaker thresholds")
				}
				return expect("max_connections", th[0].GetMaxConnections().GetValue(), uint32(7))
			})
		},
	}, {
		// Failover needs outlier detection, without which Envoy never
		// fails over: echo-a shares the sidecar's locality, echo-b is a
		// region away. Locality load balancing is on by default (as in
		// Istio), so this step comes before outlier detection is set on
		// its own, which would already give these priorities.
		name: "DestinationRule locality failover",
		apply: func(t *testing.T) {
			m.apply(t, "rule", fx.render(echoRuleYAML(`
    loadBalancer:
      localityLbSetting:
        enabled: true
        failover: [{from: r1, to: r2}]
    outlierDetection: {consecutive5xxErrors: 3}`)))
		},
		sidecar: func(s xdstest.Snapshot) error {
			return expectGroups(s, echoCluster, func(g *endpointv3.LocalityLbEndpoints) string {
				return fmt.Sprintf("priority %d", g.GetPriority())
			}, "r1/z1 priority 0 [10.244.0.30]", "r2/z2 priority 1 [10.244.0.31]")
		},
	}, {
		name: "DestinationRule outlier detection",
		apply: func(t *testing.T) {
			m.apply(t, "rule", fx.render(echoRuleYAML(`outlierDetection: {consecutive5xxErrors: 5}`)))
		},
		sidecar: func(s xdstest.Snapshot) error {
			return clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
				return expect("outlier_detection.consecutive_5xx", c.GetOutlierDetection().GetConsecutive_5Xx().GetValue(), uint32(5))
			})
		},
	}, {
		name: "DestinationRule locality distribute",
		apply: func(t *testing.T) {
			m.apply(t, "rule", fx.render(echoRuleYAML(`
    loadBalancer:
      localityLbSetting:
        enabled: true
        distribute:
        - from: r1/z1/*
          to: {"r1/z1/*": 80, "r2/z2/*": 20}`)))
		},
		sidecar: func(s xdstest.Snapshot) error {
			return expectGroups(s, echoCluster, func(g *endpointv3.LocalityLbEndpoints) string {
				return fmt.Sprintf("weight %d", g.GetLoadBalancingWeight().GetValue())
			}, "r1/z1 weight 80 [10.244.0.30]", "r2/z2 weight 20 [10.244.0.31]")
		},
	}, {
		name:  "DestinationRule subsets added",
		apply: func(t *testing.T) { m.apply(t, "rule", fx.render(echoSubsetsRuleYAML)) },
		sidecar: func(s xdstest.Snapshot) error {
			for cluster, want := range map[string]string{echoV1: "10.244.0.30", echoV2: "10.244.0.31"} {
				if s.Clusters[cluster] == nil {
					return fmt.Errorf("no active cluster %s", cluster)
				}
				if err := expect(cluster+" endpoints", addresses(s.Endpoints[cluster]), []string{want}); err != nil {
					return err
				}
			}
			return nil
		},
	}, {
		// A VirtualService picks a subset: only RDS changes; the route
		// names a cluster the client already holds.
		name: "VirtualService routes to a subset",
		apply: func(t *testing.T) {
			m.apply(t, "route", fx.render(`
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: {{.NS}}}
spec:
  hosts: [echo]
  http:
  - route:
    - destination: {host: echo, subset: v2}
`))
		},
		sidecar: func(s xdstest.Snapshot) error { return expectRoute(s, "8080", echo, "/ -> "+echoV2) },
	}, {
		name:    "VirtualService removed",
		apply:   func(t *testing.T) { m.remove(t, "route") },
		sidecar: func(s xdstest.Snapshot) error { return expectRoute(s, "8080", echo, "/ -> "+echoCluster) },
	}, {
		name:  "DestinationRule subsets removed",
		apply: func(t *testing.T) { m.apply(t, "rule", fx.render(lbRuleYAML("ROUND_ROBIN"))) },
		sidecar: func(s xdstest.Snapshot) error {
			for _, cluster := range []string{echoV1, echoV2} {
				if s.Clusters[cluster] != nil || s.Endpoints[cluster] != nil {
					return fmt.Errorf("cluster %s still active", cluster)
				}
			}
			return nil
		},
	}, {
		name: "DestinationRule tunnel",
		apply: func(t *testing.T) {
			m.apply(t, "db-rule", fx.render(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: db, namespace: {{.NS}}}
spec:
  host: db.{{.NS}}.svc.cluster.local
  trafficPolicy:
    tunnel: {protocol: CONNECT, targetHost: db.internal, targetPort: 15009}
`))
		},
		sidecar: func(s xdstest.Snapshot) error {
			l := s.Listeners["10.0.0.60_5432"]
			if l == nil {
				return fmt.Errorf("no active listener 10.0.0.60_5432")
			}
			return expect("tunneling_config.hostname", tunnelHostname(t, l), "db.internal:15009")
		},
	}, {
		name: "Service port added",
		apply: func(t *testing.T) {
			m.run(t, "", "patch", "service", "echo", "-n", fx.NS, "--type=json",
				"-p", `[{"op":"add","path":"/spec/ports/-","value":{"name":"http-admin","port":9080,"targetPort":9080}}]`)
			// The EndpointSlice controller would add the port to the slice.
			m.run(t, "", "patch", "endpointslice", "echo", "-n", fx.NS, "--type=json",
				"-p", `[{"op":"add","path":"/ports/-","value":{"name":"http-admin","port":9080}}]`)
		},
		sidecar: func(s xdstest.Snapshot) error {
			cluster := "outbound|9080||" + echo
			if s.Clusters[cluster] == nil {
				return fmt.Errorf("no active cluster %s", cluster)
			}
			if s.Listeners["0.0.0.0_9080"] == nil {
				return fmt.Errorf("no active listener 0.0.0.0_9080")
			}
			if err := expect("endpoints of "+cluster, addresses(s.Endpoints[cluster]), []string{"10.244.0.30", "10.244.0.31"}); err != nil {
				return err
			}
			return expectRoute(s, "9080", echo, "/ -> "+cluster)
		},
	}, {
		name: "endpoint changed",
		apply: func(t *testing.T) {
			m.run(t, "", "patch", "endpointslice", "echo", "-n", fx.NS, "--type=json",
				"-p", `[{"op":"replace","path":"/endpoints/0/addresses/0","value":"10.244.0.40"}]`)
		},
		sidecar: func(s xdstest.Snapshot) error {
			if s.Clusters[echoCluster] == nil {
				return fmt.Errorf("no active cluster %s", echoCluster)
			}
			return expect("endpoints", addresses(s.Endpoints[echoCluster]), []string{"10.244.0.31", "10.244.0.40"})
		},
	}, {
		name: "Ingress path added",
		apply: func(t *testing.T) {
			m.run(t, "", "patch", "ingress", "web", "-n", gw.NS, "--type=json",
				"-p", `[{"op":"add","path":"/spec/rules/0/http/paths/-","value":{"path":"/api/v2","pathType":"Exact","backend":{"service":{"name":"web","port":{"number":9090}}}}}]`)
		},
		gateway: func(s xdstest.Snapshot) error {
			return expectRoute(s, "http.8080", "web.example.com", "/api/v2 -> outbound|9090||web.changes-gw.svc.cluster.local")
		},
	}, {
		name: "gateway TLS Secret rotated",
		apply: func(t *testing.T) {
			b64 := base64.StdEncoding.EncodeToString
			m.run(t, "", "patch", "secret", "web-tls", "-n", gw.NS, "--type=merge",
				"-p", fmt.Sprintf(`{"data":{"tls.crt":%q,"tls.key":%q}}`, b64(rotatedCert), b64(rotatedKey)))
		},
		gateway: func(s xdstest.Snapshot) error {
			return expect("certificate", secretCert(s, gwSecret), string(rotatedCert))
		},
	}, {
		// The control plane links the sidecar to web-0 by its IP; the Pod's
		// labels decide which Services select it, and so its inbound side.
		name: "sidecar Pod relabelled",
		apply: func(t *testing.T) {
			m.run(t, "", "label", "pod", "web-0", "-n", fx.NS, "role=admin", "app-")
		},
		sidecar: func(s xdstest.Snapshot) error {
			if s.Clusters["inbound|9000||"] == nil || s.Clusters["inbound|8080||"] != nil {
				return fmt.Errorf("inbound clusters %v, want inbound|9000|| (admin selects the Pod) and not inbound|8080|| (web no longer does)",
					inboundClusters(s))
			}
			var chains []string
			for _, fc := range s.Listeners["virtualInbound"].GetFilterChains() {
				chains = append(chains, fc.GetName())
			}
			if !slices.Contains(chains, "0.0.0.0_9000") || slices.Contains(chains, "0.0.0.0_8080") {
				return fmt.Errorf("virtualInbound chains %v, want 0.0.0.0_9000 and not 0.0.0.0_8080", chains)
			}
			return nil
		},
	}, {
		// The injector labels the Pods it gives a sidecar; their endpoints
		// carry the label to the clusters' auto mTLS match.
		name: "echo Pod gets a sidecar",
		apply: func(t *testing.T) {
			m.apply(t, "rule", fx.render(echoRuleYAML(`loadBalancer: {simple: ROUND_ROBIN}`)))
			m.run(t, "", "label", "pod", "echo-a", "-n", fx.NS, "security.istio.io/tlsMode=istio")
		},
		sidecar: func(s xdstest.Snapshot) error {
			if err := clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
				return expect("transport socket matches", len(c.GetTransportSocketMatches()), 1)
			}); err != nil {
				return err
			}
			return expect("endpoints marked for mutual TLS", tlsModeEndpoints(s.Endpoints[echoCluster]), []string{"10.244.0.40:8080"})
		},
	}, {
		name:  "PeerAuthentication STRICT",
		apply: func(t *testing.T) { m.apply(t, "peer-authentication", fx.render(namespacePeerAuthnYAML("STRICT"))) },
		sidecar: func(s xdstest.Snapshot) error {
			return expect("virtualInbound chains for 9000", inboundChains(s, 9000), []string{"0.0.0.0_9000-mtls (requires a client certificate)"})
		},
	}, {
		// A namespace that disables mutual TLS takes plaintext in, and
		// auto mTLS sends it plaintext.
		name:  "PeerAuthentication DISABLE",
		apply: func(t *testing.T) { m.apply(t, "peer-authentication", fx.render(namespacePeerAuthnYAML("DISABLE"))) },
		sidecar: func(s xdstest.Snapshot) error {
			if err := expect("virtualInbound chains for 9000", inboundChains(s, 9000), []string{"0.0.0.0_9000"}); err != nil {
				return err
			}
			return clusterHas(s, echoCluster, func(c *clusterv3.Cluster) error {
				return expect("transport socket matches", len(c.GetTransportSocketMatches()), 0)
			})
		},
	}}

	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			condOf := func(c *changeClient) func(xdstest.Snapshot) error {
				if c.proxy == "sidecar" {
					return step.sidecar
				}
				return step.gateway
			}
			for _, c := range clients {
				if cond := condOf(c); cond != nil && cond(c.Active()) == nil {
					t.Fatalf("%s already holds for %s before the change; the step would prove nothing", step.name, c)
				}
			}
			step.apply(t)
			for _, c := range clients {
				t.Run(c.String(), func(t *testing.T) {
					if err := c.WaitFor(warmBound, condOf(c)); err != nil {
						t.Errorf("%v\nrequests:\n%s", err, requestLog(c.EnvoyClient))
					}
					nacks := c.Nacks()
					if len(nacks) > c.nacksSeen {
						t.Errorf("NACKs: %v", nacks[c.nacksSeen:])
						c.nacksSeen = len(nacks)
					}
				})
			}
		})
	}
}

// changeClient is an Envoy-semantics client that follows one proxy
// through all the steps.
type changeClient struct {
	*xdstest.EnvoyClient
	proxy     string
	mode      xdstest.Mode
	nacksSeen int // NACKs already reported by an earlier step
}

func (c *changeClient) String() string { return c.proxy + "/" + c.mode.String() }

// expect compares one value of the active configuration with the one a step
// wants.
func expect[V any](what string, got, want V) error {
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("%s is %v, want %v", what, got, want)
	}
	return nil
}

// clusterHas checks the active version of a cluster.
func clusterHas(s xdstest.Snapshot, name string, check func(*clusterv3.Cluster) error) error {
	c := s.Clusters[name]
	if c == nil {
		return fmt.Errorf("no active cluster %s", name)
	}
	if err := check(c); err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	return nil
}

func secretCert(s xdstest.Snapshot, name string) string {
	return string(s.Secrets[name].GetTlsCertificate().GetCertificateChain().GetInlineBytes())
}

// addresses are the endpoint addresses of a load assignment, sorted.
func addresses(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, g := range cla.GetEndpoints() {
		out = append(out, groupAddresses(g)...)
	}
	slices.Sort(out)
	return out
}

func groupAddresses(g *endpointv3.LocalityLbEndpoints) []string {
	var out []string
	for _, e := range g.GetLbEndpoints() {
		out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
	}
	slices.Sort(out)
	return out
}

// expectGroups compares the locality groups of a cluster's active load
// assignment, each described as "region/zone <what> [addresses]", in any
// order (priority and weight are fields of a group, not its position).
func expectGroups(s xdstest.Snapshot, cluster string, what func(*endpointv3.LocalityLbEndpoints) string, want ...string) error {
	var got []string
	for _, g := range s.Endpoints[cluster].GetEndpoints() {
		got = append(got, fmt.Sprintf("%s/%s %s %v", g.GetLocality().GetRegion(), g.GetLocality().GetZone(), what(g), groupAddresses(g)))
	}
	slices.Sort(got)
	return expect("locality groups of "+cluster, got, want)
}

// expectRoute checks that the active route configuration's virtual host for
// domain has the route want ("<path> -> <cluster>").
func expectRoute(s xdstest.Snapshot, routeConfig, domain, want string) error {
	rc := s.Routes[routeConfig]
	if rc == nil {
		return fmt.Errorf("no route configuration %s", routeConfig)
	}
	var got []string
	for _, vh := range rc.GetVirtualHosts() {
		if slices.Contains(vh.GetDomains(), domain) {
			for _, r := range vh.GetRoutes() {
				got = append(got, routeMatch(r.GetMatch())+" -> "+r.GetRoute().GetCluster())
			}
		}
	}
	if !slices.Contains(got, want) {
		return fmt.Errorf("routes of %s in %s are %v, want one %q", domain, routeConfig, got, want)
	}
	return nil
}

func routeMatch(m *routev3.RouteMatch) string {
	return m.GetPath() + m.GetPathSeparatedPrefix() + m.GetPrefix()
}

// inboundChains names virtualInbound's chains for one destination port,
// noting those that require a client certificate.
func inboundChains(s xdstest.Snapshot, port uint32) []string {
	var out []string
	for _, fc := range s.Listeners["virtualInbound"].GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != port {
			continue
		}
		name := fc.GetName()
		ctx := &tlsv3.DownstreamTlsContext{}
		if ts := fc.GetTransportSocket(); ts != nil && ts.GetTypedConfig().UnmarshalTo(ctx) == nil && ctx.GetRequireClientCertificate().GetValue() {
			name += " (requires a client certificate)"
		}
		out = append(out, name)
	}
	return out
}

// tlsModeEndpoints lists the endpoints whose metadata selects auto mTLS's
// mutual TLS match.
func tlsModeEndpoints(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, g := range cla.GetEndpoints() {
		for _, lb := range g.GetLbEndpoints() {
			mode := lb.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
			if mode == "istio" {
				sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
			}
		}
	}
	return out
}

func namespacePeerAuthnYAML(mode string) string {
	return `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: {{.NS}}}
spec:
  mtls: {mode: ` + mode + `}
`
}

func inboundClusters(s xdstest.Snapshot) []string {
	var out []string
	for name := range s.Clusters {
		if strings.HasPrefix(name, "inbound|") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// echoRuleYAML is echo's DestinationRule with the given trafficPolicy
// fields (YAML indented under trafficPolicy).
func echoRuleYAML(policy string) string {
	return `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: {{.NS}}}
spec:
  host: echo.{{.NS}}.svc.cluster.local
  trafficPolicy:
    ` + strings.TrimLeft(policy, "\n ") + "\n"
}

const echoSubsetsRuleYAML = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: {{.NS}}}
spec:
  host: echo.{{.NS}}.svc.cluster.local
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`

// changesWorldYAML: the sidecar's Pod web-0, selected by web (and, once
// relabelled, by admin); echo with one Pod in each of two localities (the
// region from the Pod's label, the zone from the EndpointSlice, as
// Kubernetes sets them) and versions; db, a TCP service to tunnel.
const changesWorldYAML = `
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: {{.NS}}
  labels: {app: web, version: v1}
spec:
  containers: [{name: web, image: example/web}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.50
  selector: {app: web}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: admin, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.90
  selector: {role: admin}
  ports: [{name: http, port: 9000, targetPort: 9000}]
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-a
  namespace: {{.NS}}
  labels: {app: echo, version: v1, topology.kubernetes.io/region: r1}
spec:
  containers: [{name: echo, image: example/echo}]
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-b
  namespace: {{.NS}}
  labels: {app: echo, version: v2, topology.kubernetes.io/region: r2}
spec:
  containers: [{name: echo, image: example/echo}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.80
  selector: {app: echo}
  ports: [{name: http, port: 8080, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo
  namespace: {{.NS}}
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: ["10.244.0.30"]
  conditions: {ready: true}
  zone: z1
  targetRef: {kind: Pod, name: echo-a, namespace: {{.NS}}}
- addresses: ["10.244.0.31"]
  conditions: {ready: true}
  zone: z2
  targetRef: {kind: Pod, name: echo-b, namespace: {{.NS}}}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: {{.NS}}}
spec:
  clusterIP: 10.0.0.60
  selector: {app: db}
  ports: [{name: tcp, port: 5432, targetPort: 5432}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db
  namespace: {{.NS}}
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports: [{name: tcp, port: 5432}]
endpoints:
- addresses: ["10.244.0.9"]
  conditions: {ready: true}
`
