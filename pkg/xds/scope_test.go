package xds

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// stampedGenerator stamps every resource with the push context version (and
// for EDS the host's endpoints version), so every regeneration yields a new
// response: what a client receives is then exactly what the server chose to
// regenerate for it. It only emits services the proxy can see, and on an
// endpoint-only request only the services the request names, like the real
// generators. Its clusters are not named after load assignments, so that
// EDS follows CDS only where the push scope says so: the warming rule (a
// changed cluster's load assignment is re-sent) has its own tests, with
// the real generators, in warming_test.go.
type stampedGenerator struct {
	typeURL string
}

func (g *stampedGenerator) Generate(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
	var out model.Resources
	emit := func(name, stamp string) {
		out = append(out, model.Resource{Name: name, Resource: mustAny(wrapperspb.String(name + "@" + stamp))})
	}
	switch g.typeURL {
	case ClusterType:
		for _, svc := range pc.ServicesVisibleTo(p.Namespace) {
			emit("cluster:"+svc.Hostname, pc.Version())
		}
	case ListenerType:
		for _, svc := range pc.ServicesVisibleTo(p.Namespace) {
			emit(svc.Hostname, pc.Version())
		}
	case RouteType, SecretType:
		for _, name := range w.ResourceNames {
			emit(name, pc.Version())
		}
	case EndpointType:
		for _, svc := range pc.ServicesVisibleTo(p.Namespace) {
			key := model.ConfigKey{Kind: model.KindEndpoints, Namespace: svc.Namespace, Name: svc.Name}
			if _, touched := req.ConfigsUpdated[key]; !req.Full && !touched {
				continue
			}
			emit(svc.Hostname, pc.Version()+"/"+formatUint(pc.EndpointsVersion(svc.Hostname)))
		}
	}
	return out, nil
}

func stampedGenerators() map[string]Generator {
	set := map[string]Generator{probeType: GeneratorFunc(func(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
		return genProbe(p, pc, w, req), nil
	})}
	for _, typeURL := range []string{ClusterType, ListenerType, RouteType, EndpointType, SecretType} {
		set[typeURL] = &stampedGenerator{typeURL: typeURL}
	}
	return set
}

func upsertService(s model.Store, name string, exportTo model.ExportTo, labels map[string]string) {
	s.UpsertService(&model.Service{
		Name: name, Namespace: "default", Hostname: hostname(name), ExportTo: exportTo, Labels: labels,
		Ports: []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}},
	})
}

func upsertExternalName(s model.Store, name string, exportTo model.ExportTo, externalName string) {
	s.UpsertService(&model.Service{
		Name: name, Namespace: "default", Hostname: hostname(name), ExportTo: exportTo, ExternalName: externalName,
		Ports: []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP}},
	})
}

func setHTTPEndpoints(s model.Store, name string, ips ...string) {
	eps := make([]*model.Endpoint, len(ips))
	for i, ip := range ips {
		eps[i] = &model.Endpoint{Address: ip, Port: 8080, ServicePortName: "http", Namespace: "default",
			Labels: map[string]string{"version": "v1"}}
	}
	s.SetEndpoints(serviceKey(name), name+"-slice", eps)
}

// markSidecars marks the endpoints setHTTPEndpoints gave service name as
// having sidecars that take mutual TLS.
func markSidecars(s model.Store, name string) {
	var eps []*model.Endpoint
	for _, ep := range s.Endpoints(serviceKey(name)) {
		marked := *ep
		marked.MTLS = true
		eps = append(eps, &marked)
	}
	s.SetEndpoints(serviceKey(name), name+"-slice", eps)
}

// setPlainEndpoints gives service name a second slice, of endpoints without
// sidecars at ips, and returns the key of the change.
func setPlainEndpoints(s model.Store, name string, ips ...string) model.ConfigKey {
	var eps []*model.Endpoint
	for _, ip := range ips {
		eps = append(eps, &model.Endpoint{Address: ip, Port: 8080, ServicePortName: "http", Namespace: "default"})
	}
	s.SetEndpoints(serviceKey(name), name+"-plain", eps)
	return model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: name}
}

var ruleCreated = time.Unix(1_700_000_000, 0)

func upsertRule(s model.Store, name, host string, spec *networking.DestinationRule) {
	spec.Host = host
	s.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: "default", Name: name,
		CreationTime: ruleCreated, Spec: spec})
}

func ruleKey(name string) model.ConfigKey {
	return model.ConfigKey{Kind: model.KindDestinationRule, Namespace: "default", Name: name}
}

func subsetRule(lb networking.LoadBalancerSettings_SimpleLB, v1Labels map[string]string) *networking.DestinationRule {
	return &networking.DestinationRule{
		TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: lb}}},
		Subsets: []*networking.Subset{{Name: "v1", Labels: v1Labels}},
	}
}

func upsertPod(s model.Store, name, ip string, labels map[string]string) {
	s.UpsertWorkload(&model.Workload{Name: name, Namespace: "default", IPs: []string{ip}, Labels: labels})
}

// withOutliers is the subset rule of TestPushScopes with outlier detection.
func withOutliers(consecutive5xx uint32) *networking.DestinationRule {
	dr := subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, map[string]string{"version": "v1"})
	dr.TrafficPolicy.OutlierDetection = &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(consecutive5xx)}
	return dr
}

// TestPushScopes asserts, for each kind of change, exactly which types each
// proxy is pushed: "mine" lives in the services' namespace and sees the
// restricted service "private" (exported to default only); "other" lives in
// namespace other and sees only the public service "a"; "gateway" is the
// ingress gateway (a router in istio-system with the gateway's labels),
// which serves an Ingress routing to "a" with TLS from Secret a-cert.
func TestPushScopes(t *testing.T) {
	private, public := hostname("private"), hostname("a")
	v1 := map[string]string{"version": "v1"}
	all := []string{"cds", "eds", "lds", "rds"}
	gatewayAll := []string{"cds", "eds", "lds", "rds", "sds"}
	gatewayConfig := []string{"lds", "rds", "sds"}
	certA, certB := scopeTestPEM(t, "a.example.com"), scopeTestPEM(t, "a.example.com")
	withPrivateRule := func(s model.Store) {
		upsertRule(s, "private", private, subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, v1))
	}
	// sidecarsBehindPassthrough: every endpoint of private has a sidecar,
	// and its clusters go to original destinations.
	sidecarsBehindPassthrough := func(s model.Store) {
		upsertRule(s, "private", private, subsetRule(networking.LoadBalancerSettings_PASSTHROUGH, v1))
		markSidecars(s, "private")
	}
	cases := []struct {
		name string
		seed func(model.Store)
		// change mutates the store and returns the keys the sources would
		// report; nil keys make a forced push.
		change               func(model.Store) []model.ConfigKey
		mine, other, gateway []string
	}{
		{
			name: "service updated",
			change: func(s model.Store) []model.ConfigKey {
				upsertService(s, "private", model.ExportTo{"default"}, map[string]string{"tier": "gold"})
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "private"}}
			},
			mine: all,
		},
		{
			name: "service deleted",
			change: func(s model.Store) []model.ConfigKey {
				s.DeleteService(serviceKey("private"))
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "private"}}
			},
			mine: all,
		},
		{
			name: "service no longer exported to other",
			seed: func(s model.Store) { upsertService(s, "private", model.ExportTo{"default", "other"}, nil) },
			change: func(s model.Store) []model.ConfigKey {
				upsertService(s, "private", model.ExportTo{"default"}, nil)
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "private"}}
			},
			mine: all, other: all,
		},
		{
			name: "service newly exported to other",
			change: func(s model.Store) []model.ConfigKey {
				upsertService(s, "private", model.ExportTo{"default", "other"}, nil)
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "private"}}
			},
			mine: all, other: all,
		},
		{
			// "alias" (seen from other only) names "hop" (seen from default
			// only), an alias of "a": other's proxies route alias's names as
			// a's. When hop stops naming a, alias is a DNS service again, so
			// other must be pushed though it sees neither hop nor a change of a.
			name: "a hop of an alias chain that the alias's clients do not see",
			seed: func(s model.Store) {
				upsertExternalName(s, "hop", model.ExportTo{"default"}, hostname("a"))
				upsertExternalName(s, "alias", model.ExportTo{"other"}, hostname("hop"))
			},
			change: func(s model.Store) []model.ConfigKey {
				upsertExternalName(s, "hop", model.ExportTo{"default"}, "a.example.com")
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "hop"}}
			},
			mine: all, other: all,
		},
		{
			name: "endpoints of the restricted service",
			change: func(s model.Store) []model.ConfigKey {
				setHTTPEndpoints(s, "private", "10.9.0.1", "10.9.0.2")
				return []model.ConfigKey{{Kind: model.KindEndpoints, Namespace: "default", Name: "private"}}
			},
			mine: []string{"eds"},
		},
		{
			// Clusters verify servers against the identities behind the
			// service, so a new one makes the endpoint push a service push.
			name: "a new workload identity behind the restricted service",
			change: func(s model.Store) []model.ConfigKey {
				eps := s.Endpoints(serviceKey("private"))
				moved := *eps[0]
				moved.ServiceAccount = "private-v2"
				s.SetEndpoints(serviceKey("private"), "private-slice", []*model.Endpoint{&moved})
				return []model.ConfigKey{{Kind: model.KindEndpoints, Namespace: "default", Name: "private"}}
			},
			mine: all,
		},
		{
			// The same, when a config change in the same debounce window
			// makes the push a full one.
			name: "a new workload identity behind the restricted service, beside a config change",
			change: func(s model.Store) []model.ConfigKey {
				eps := s.Endpoints(serviceKey("private"))
				moved := *eps[0]
				moved.ServiceAccount = "private-v2"
				s.SetEndpoints(serviceKey("private"), "private-slice", []*model.Endpoint{&moved})
				s.UpsertNamespace(&model.Namespace{Name: "other", Labels: map[string]string{"team": "x"}})
				return []model.ConfigKey{
					{Kind: model.KindEndpoints, Namespace: "default", Name: "private"},
					{Kind: model.KindNamespace, Name: "other"},
				}
			},
			mine: all,
		},
		{
			// An original-destination cluster sends mutual TLS only when
			// every endpoint of the service takes it: a workload without
			// a sidecar joining makes the endpoint push a service push.
			name: "an endpoint without a sidecar joins the restricted service",
			seed: sidecarsBehindPassthrough,
			change: func(s model.Store) []model.ConfigKey {
				return []model.ConfigKey{setPlainEndpoints(s, "private", "10.9.9.1")}
			},
			mine: all,
		},
		{
			// Without a rule that sends to original destinations, no
			// cluster depends on it: the endpoints alone change.
			name: "an endpoint without a sidecar joins the restricted service, no passthrough rule",
			seed: func(s model.Store) { markSidecars(s, "private") },
			change: func(s model.Store) []model.ConfigKey {
				return []model.ConfigKey{setPlainEndpoints(s, "private", "10.9.9.1")}
			},
			mine: []string{"eds"},
		},
		{
			name: "an endpoint without a sidecar joins the restricted service, beside a config change",
			seed: sidecarsBehindPassthrough,
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertNamespace(&model.Namespace{Name: "other", Labels: map[string]string{"team": "x"}})
				return []model.ConfigKey{setPlainEndpoints(s, "private", "10.9.9.1"), {Kind: model.KindNamespace, Name: "other"}}
			},
			mine: all,
		},
		{
			name: "the last endpoint without a sidecar leaves the restricted service",
			seed: func(s model.Store) { sidecarsBehindPassthrough(s); setPlainEndpoints(s, "private", "10.9.9.1") },
			change: func(s model.Store) []model.ConfigKey {
				return []model.ConfigKey{setPlainEndpoints(s, "private")}
			},
			mine: all,
		},
		{
			name: "another endpoint without a sidecar, where one was already",
			seed: func(s model.Store) { sidecarsBehindPassthrough(s); setPlainEndpoints(s, "private", "10.9.9.1") },
			change: func(s model.Store) []model.ConfigKey {
				return []model.ConfigKey{setPlainEndpoints(s, "private", "10.9.9.1", "10.9.9.2")}
			},
			mine: []string{"eds"},
		},
		{
			name: "endpoints of the public service",
			change: func(s model.Store) []model.ConfigKey {
				setHTTPEndpoints(s, "a", "10.9.0.3")
				return []model.ConfigKey{{Kind: model.KindEndpoints, Namespace: "default", Name: "a"}}
			},
			mine: []string{"eds"}, other: []string{"eds"}, gateway: []string{"eds"},
		},
		{
			name: "another proxy's pod",
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertWorkload(&model.Workload{Name: "pod-1", Namespace: "default", IPs: []string{"10.9.0.9"}})
				return []model.ConfigKey{{Kind: model.KindWorkload, Namespace: "default", Name: "pod-1"}}
			},
		},
		{
			// The proxy connected before its Pod was known: once it is, the
			// proxy's inbound side (its own services) must follow.
			name: "the proxy's own pod appears",
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertWorkload(&model.Workload{Name: "mine", Namespace: "default", IPs: []string{"10.0.0.1"},
					Labels: map[string]string{"app": "mine"}})
				return []model.ConfigKey{{Kind: model.KindWorkload, Namespace: "default", Name: "mine"}}
			},
			mine: all,
		},
		{
			name: "the proxy's own pod relabelled, selected by the same services",
			seed: func(s model.Store) { upsertPod(s, "mine", "10.0.0.1", map[string]string{"app": "mine"}) },
			change: func(s model.Store) []model.ConfigKey {
				upsertPod(s, "mine", "10.0.0.1", map[string]string{"app": "mine", "rollout": "b"})
				return []model.ConfigKey{{Kind: model.KindWorkload, Namespace: "default", Name: "mine"}}
			},
		},
		{
			name: "the proxy's own pod relabelled into a service's selection",
			seed: func(s model.Store) {
				upsertPod(s, "mine", "10.0.0.1", map[string]string{"app": "mine"})
				s.UpsertService(&model.Service{Name: "selecting", Namespace: "default", Hostname: hostname("selecting"),
					Selector: map[string]string{"rollout": "b"},
					Ports:    []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}}})
			},
			change: func(s model.Store) []model.ConfigKey {
				upsertPod(s, "mine", "10.0.0.1", map[string]string{"app": "mine", "rollout": "b"})
				return []model.ConfigKey{{Kind: model.KindWorkload, Namespace: "default", Name: "mine"}}
			},
			mine: all,
		},
		{
			// Its inbound listener follows the PeerAuthentication that
			// selects the Pod by its labels, whatever the services.
			name: "the proxy's own pod relabelled into a workload policy",
			seed: func(s model.Store) {
				upsertPod(s, "mine", "10.0.0.1", map[string]string{"app": "mine"})
				s.UpsertConfig(&model.Config{
					Kind: model.KindPeerAuthentication, Namespace: "default", Name: "strict-b",
					Spec: &security.PeerAuthentication{
						Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"rollout": "b"}},
						Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT},
					},
				})
			},
			change: func(s model.Store) []model.ConfigKey {
				upsertPod(s, "mine", "10.0.0.1", map[string]string{"app": "mine", "rollout": "b"})
				return []model.ConfigKey{{Kind: model.KindWorkload, Namespace: "default", Name: "mine"}}
			},
			mine: all,
		},
		{
			name: "namespace",
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertNamespace(&model.Namespace{Name: "other", Labels: map[string]string{"team": "x"}})
				return []model.ConfigKey{{Kind: model.KindNamespace, Name: "other"}}
			},
		},
		{
			// Inbound listeners follow PeerAuthentications, and clusters
			// (auto mTLS) the namespace-wide ones; nothing else does.
			name: "peer authentication",
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertConfig(&model.Config{
					Kind: model.KindPeerAuthentication, Namespace: "other", Name: "default",
					Spec: &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}},
				})
				return []model.ConfigKey{{Kind: model.KindPeerAuthentication, Namespace: "other", Name: "default"}}
			},
			mine: []string{"cds", "lds"}, other: []string{"cds", "lds"}, gateway: []string{"cds", "lds"},
		},
		{
			// Auto mTLS sends plaintext to an endpoint whose own policy
			// disables mutual TLS, and EDS says which endpoints those are.
			name: "peer authentication that disables mutual TLS for a workload behind a service",
			seed: func(s model.Store) {
				eps := s.Endpoints(serviceKey("a"))
				sidecar := *eps[0]
				sidecar.MTLS = true
				s.SetEndpoints(serviceKey("a"), "a-slice", []*model.Endpoint{&sidecar})
			},
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertConfig(&model.Config{
					Kind: model.KindPeerAuthentication, Namespace: "default", Name: "plain",
					Spec: &security.PeerAuthentication{
						Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"version": "v1"}},
						Mtls:     &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_DISABLE},
					},
				})
				return []model.ConfigKey{{Kind: model.KindPeerAuthentication, Namespace: "default", Name: "plain"}}
			},
			mine: []string{"cds", "eds", "lds"}, other: []string{"cds", "eds", "lds"}, gateway: []string{"cds", "eds", "lds"},
		},
		{
			// Only routes follow VirtualServices; clusters of the subsets
			// they name exist already (from the DestinationRule), and gRPC
			// clients subscribe to them through CDS when the routes say so.
			name: "virtual service",
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertConfig(&model.Config{
					Kind: model.KindVirtualService, Namespace: "default", Name: "to-v1",
					Spec: &networking.VirtualService{Hosts: []string{"private"}, Http: []*networking.HTTPRoute{{
						Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "private", Subset: "v1"}}},
					}}},
				})
				return []model.ConfigKey{{Kind: model.KindVirtualService, Namespace: "default", Name: "to-v1"}}
			},
			mine: []string{"rds"}, other: []string{"rds"}, gateway: []string{"rds"},
		},
		{
			name: "new rule with subsets",
			change: func(s model.Store) []model.ConfigKey {
				withPrivateRule(s)
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "eds"},
		},
		{
			name: "rule's load balancer changed",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				upsertRule(s, "private", private, subsetRule(networking.LoadBalancerSettings_LEAST_REQUEST, v1))
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds"},
		},
		{
			name: "rule's subset labels changed",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				upsertRule(s, "private", private, subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, map[string]string{"version": "v2"}))
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "eds"},
		},
		{
			name: "rule's tunnel changed",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				dr := subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, v1)
				dr.TrafficPolicy.Tunnel = &networking.TrafficPolicy_TunnelSettings{TargetHost: "egress.example.com", TargetPort: 8443}
				upsertRule(s, "private", private, dr)
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "lds"},
		},
		{
			// Failover priorities are in the load assignments.
			name: "rule's locality failover added",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				dr := subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, v1)
				dr.TrafficPolicy.LoadBalancer.LocalityLbSetting = &networking.LocalityLoadBalancerSetting{
					Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "us-east", To: "us-west"}}}
				upsertRule(s, "private", private, dr)
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "eds"},
		},
		{
			// Without outlier detection Envoy never fails over, so locality
			// priorities start with it.
			name: "rule's outlier detection added",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				upsertRule(s, "private", private, withOutliers(5))
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "eds"},
		},
		{
			name: "rule's outlier thresholds tuned",
			seed: func(s model.Store) { upsertRule(s, "private", private, withOutliers(5)) },
			change: func(s model.Store) []model.ConfigKey {
				upsertRule(s, "private", private, withOutliers(7))
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds"},
		},
		{
			name: "rule's consistent hash changed",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				dr := subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, v1)
				dr.TrafficPolicy.LoadBalancer = &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
					ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
						HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}
				upsertRule(s, "private", private, dr)
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "rds"},
		},
		{
			// A route may lead to a host that no Service has, and its
			// hash policy comes from the rules for that host all the same;
			// here only a wildcard rule matches it, which proxies outside
			// its namespace do not use for a host without a Service.
			name: "a wildcard rule's consistent hash, for a host routed to that no service has",
			seed: func(s model.Store) {
				s.UpsertConfig(&model.Config{
					Kind: model.KindVirtualService, Namespace: "default", Name: "to-gone",
					Spec: &networking.VirtualService{Hosts: []string{"a"}, Http: []*networking.HTTPRoute{{
						Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "gone.elsewhere.svc." + domain}}},
					}}},
				})
			},
			change: func(s model.Store) []model.ConfigKey {
				upsertRule(s, "elsewhere", "*.elsewhere.svc."+domain, &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
					LoadBalancer: &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
						ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
							HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"}}}}}})
				return []model.ConfigKey{ruleKey("elsewhere")}
			},
			mine: []string{"rds"},
		},
		{
			name: "rule deleted",
			seed: withPrivateRule,
			change: func(s model.Store) []model.ConfigKey {
				s.DeleteConfig(ruleKey("private"))
				return []model.ConfigKey{ruleKey("private")}
			},
			mine: []string{"cds", "eds"},
		},
		{
			name: "rule of a public host",
			change: func(s model.Store) []model.ConfigKey {
				upsertRule(s, "a", public, &networking.DestinationRule{TrafficPolicy: &networking.TrafficPolicy{
					ConnectionPool: &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 10}}}})
				return []model.ConfigKey{ruleKey("a")}
			},
			mine: []string{"cds"}, other: []string{"cds"}, gateway: []string{"cds"},
		},
		{
			name: "forced full push",
			change: func(model.Store) []model.ConfigKey {
				return nil
			},
			mine: all, other: all, gateway: gatewayAll,
		},
		{
			name: "gateway's certificate rotated",
			change: func(s model.Store) []model.ConfigKey {
				upsertTLSSecret(s, "a-cert", certB)
				return []model.ConfigKey{secretKey("a-cert")}
			},
			gateway: []string{"sds"},
		},
		{
			name: "a secret no Ingress uses",
			change: func(s model.Store) []model.ConfigKey {
				upsertTLSSecret(s, "unused", certB)
				return []model.ConfigKey{secretKey("unused")}
			},
		},
		{
			// The TLS host loses its certificate: its filter chain (LDS)
			// and that chain's routes (RDS) go.
			name: "gateway's certificate no longer valid",
			change: func(s model.Store) []model.ConfigKey {
				upsertTLSSecret(s, "a-cert", scopePEM{cert: certA.cert, key: certB.key})
				return []model.ConfigKey{secretKey("a-cert")}
			},
			gateway: gatewayConfig,
		},
		{
			name: "gateway's certificate deleted",
			change: func(s model.Store) []model.ConfigKey {
				s.DeleteSecret(model.NamespacedName{Namespace: "default", Name: "a-cert"})
				return []model.ConfigKey{secretKey("a-cert")}
			},
			gateway: gatewayConfig,
		},
		{
			// A build reads the store as it is: the broken certificate is
			// in it before its own event comes, with another Secret's.
			// That later event finds nothing left to change, so this push
			// must carry the listeners.
			name: "gateway's certificate broken, built under another Secret's event",
			change: func(s model.Store) []model.ConfigKey {
				upsertTLSSecret(s, "unused", certB)
				upsertTLSSecret(s, "a-cert", scopePEM{cert: certA.cert, key: certB.key})
				return []model.ConfigKey{secretKey("unused")}
			},
			gateway: gatewayConfig,
		},
		{
			name: "ingress changed",
			change: func(s model.Store) []model.ConfigKey {
				upsertIngress(s, "/a", "/b")
				return []model.ConfigKey{{Kind: model.KindIngress, Namespace: "default", Name: "web"}}
			},
			gateway: gatewayConfig,
		},
		{
			name: "ingress class changed",
			change: func(s model.Store) []model.ConfigKey {
				s.UpsertIngressClass(&model.IngressClass{Name: "istio", Controller: "example.com/other"})
				return []model.ConfigKey{{Kind: model.KindIngressClass, Name: "istio"}}
			},
			gateway: gatewayConfig,
		},
		{
			// The gateway cannot see the service (exportTo), yet an Ingress
			// routes to it: its routes follow the service.
			name: "ingress backend the gateway cannot see",
			seed: func(s model.Store) { upsertIngress(s, "/a", "/private") },
			change: func(s model.Store) []model.ConfigKey {
				upsertService(s, "private", model.ExportTo{"default"}, map[string]string{"tier": "gold"})
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "private"}}
			},
			mine: all, gateway: gatewayAll,
		},
		{
			// The Ingress names "front", an alias of "a" through "hop"; the
			// gateway sees neither alias, and "a" does not change, yet when
			// hop names "b" instead the gateway's route goes to b.
			name: "a hop of an Ingress backend's alias chain",
			seed: func(s model.Store) {
				upsertService(s, "b", model.ExportTo{"default", "istio-system"}, nil)
				upsertExternalName(s, "hop", model.ExportTo{"default"}, hostname("a"))
				upsertExternalName(s, "front", model.ExportTo{"default"}, hostname("hop"))
				upsertIngress(s, "/a", "/front")
			},
			change: func(s model.Store) []model.ConfigKey {
				upsertExternalName(s, "hop", model.ExportTo{"default"}, hostname("b"))
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "default", Name: "hop"}}
			},
			mine: all, gateway: gatewayAll,
		},
		{
			name: "gateway service's ports",
			change: func(s model.Store) []model.ConfigKey {
				upsertGatewayService(s, 9443)
				return []model.ConfigKey{{Kind: model.KindService, Namespace: "istio-system", Name: "istio-ingressgateway"}}
			},
			mine: all, other: all, gateway: gatewayAll,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{noStoreHandler: true, generators: stampedGenerators(), seed: func(s model.Store) {
				upsertService(s, "a", nil, nil)
				setHTTPEndpoints(s, "a", "10.8.0.1")
				upsertService(s, "private", model.ExportTo{"default"}, nil)
				setHTTPEndpoints(s, "private", "10.8.0.2")
				upsertGatewayService(s, 8443)
				s.UpsertIngressClass(&model.IngressClass{Name: "istio", Controller: model.IngressController})
				upsertIngress(s, "/a")
				upsertTLSSecret(s, "a-cert", certA)
				if tc.seed != nil {
					tc.seed(s)
				}
			}})
			mine := h.sotwAs("mine", nodeIn("mine", "default", nil))
			other := h.sotwAs("other", nodeIn("other", "other", nil))
			gateway := h.sotwAs("gateway", gatewayNode())
			for _, c := range []*sotwClient{mine, other, gateway} {
				c.ack(c.subscribe(ClusterType))
				c.ack(c.subscribe(ListenerType))
				c.ack(c.subscribe(RouteType, "80"), "80")
				c.ack(c.subscribe(EndpointType, public, private), public, private)
			}
			gateway.ack(gateway.subscribe(SecretType, "kubernetes://default/a-cert"), "kubernetes://default/a-cert")
			for _, c := range []*sotwClient{mine, other, gateway} {
				c.expectQuiet("after subscribing")
			}
			if h.server.PushContext().IngressGateway() == nil {
				t.Fatal("the fixture's Ingress is not served: the gateway rows would prove nothing")
			}
			pushesBefore := map[string]float64{}
			for _, typ := range gatewayAll {
				pushesBefore[typ] = h.counter(h.server.metrics.pushes, typ)
			}

			req := &model.PushRequest{Full: true, Start: time.Now()}
			if keys := tc.change(h.store); keys != nil {
				req = nil
				for _, key := range keys {
					req = req.Merge(model.NewPushRequest(key, time.Now()))
				}
			}
			h.pushNow(req)

			pushed := func(c *sotwClient) []string {
				var types []string
				for _, r := range c.barrier() {
					types = append(types, shortType(r.GetTypeUrl()))
				}
				slices.Sort(types)
				return types
			}
			gotMine, gotOther, gotGateway := pushed(mine), pushed(other), pushed(gateway)
			if !slices.Equal(gotMine, tc.mine) {
				t.Errorf("proxy in default was pushed %v, want %v", gotMine, tc.mine)
			}
			if !slices.Equal(gotOther, tc.other) {
				t.Errorf("proxy in other was pushed %v, want %v", gotOther, tc.other)
			}
			if !slices.Equal(gotGateway, tc.gateway) {
				t.Errorf("ingress gateway was pushed %v, want %v", gotGateway, tc.gateway)
			}
			// The pushes metric records the same.
			for _, typ := range gatewayAll {
				want := 0.0
				for _, got := range [][]string{tc.mine, tc.other, tc.gateway} {
					if slices.Contains(got, typ) {
						want++
					}
				}
				if got := h.counter(h.server.metrics.pushes, typ) - pushesBefore[typ]; got != want {
					t.Errorf("meshpilot_xds_pushes_total{type=%s} grew by %v, want %v", typ, got, want)
				}
			}
		})
	}
}

// A connection that misses pushes merges their plans: what it is then pushed
// covers both changes, from the context it last saw to the newest.
func TestMergedPlansCoverEveryChange(t *testing.T) {
	h := newHarness(t, harnessConfig{noStoreHandler: true, generators: stampedGenerators(), seed: func(s model.Store) {
		upsertService(s, "private", model.ExportTo{"default"}, nil)
		setHTTPEndpoints(s, "private", "10.8.0.2")
		upsertRule(s, "private", hostname("private"), subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, nil))
	}})
	h.eventually("the first push context", h.server.Ready)
	prev := h.server.PushContext()

	// Plan 1 changes the tunnel, plan 2 the endpoints.
	dr := subsetRule(networking.LoadBalancerSettings_ROUND_ROBIN, nil)
	dr.TrafficPolicy.Tunnel = &networking.TrafficPolicy_TunnelSettings{TargetHost: "egress.example.com", TargetPort: 8443}
	upsertRule(h.store, "private", hostname("private"), dr)
	req1 := model.NewPushRequest(ruleKey("private"), time.Now())
	h.server.build(req1)
	mid := h.server.PushContext()
	p1 := newPushPlan(1, req1, prev, mid)
	setHTTPEndpoints(h.store, "private", "10.8.0.3")
	req2 := model.NewPushRequest(model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: "private"}, time.Now())
	h.server.updateEndpoints(req2)
	p2 := newPushPlan(2, req2, mid, h.server.PushContext())

	m := mergePlans(3, p1, p2)
	if m.prev != prev || m.cur != h.server.PushContext() || !m.req.Full || m.everything {
		t.Fatalf("merged plan spans the wrong contexts or request: %+v", m)
	}
	sc := m.scopeFor(&model.Proxy{Namespace: "default"})
	want := pushScope{clusters: true, listeners: true, endpoints: true}
	if sc != want {
		t.Fatalf("merged scope = %+v, want %+v", sc, want)
	}
	if eds := m.request(sc, EndpointType); eds == nil || eds.Full || len(eds.ConfigsUpdated) != 1 {
		t.Fatalf("merged EDS request = %+v, want the endpoint-only request for private", eds)
	}
	if got := m.scopeFor(&model.Proxy{Namespace: "other"}); got != (pushScope{endpoints: true}) {
		// The endpoint change reaches every EDS watcher; the generator
		// leaves out what the proxy cannot see.
		t.Fatalf("scope of a proxy that cannot see the host = %+v", got)
	}
}

// Merging plans keeps every kind of rule change a host had in either.
func TestMergePlansMergesRuleChanges(t *testing.T) {
	host := hostname("private")
	tests := []struct {
		name         string
		older, newer pushcontext.RuleChange
		want         pushcontext.RuleChange
	}{
		{"locality then tunnel", pushcontext.RuleChange{LocalityChanged: true}, pushcontext.RuleChange{TunnelChanged: true},
			pushcontext.RuleChange{LocalityChanged: true, TunnelChanged: true}},
		{"subsets then locality", pushcontext.RuleChange{SubsetsChanged: true}, pushcontext.RuleChange{LocalityChanged: true},
			pushcontext.RuleChange{SubsetsChanged: true, LocalityChanged: true}},
		{"locality then nothing", pushcontext.RuleChange{LocalityChanged: true}, pushcontext.RuleChange{},
			pushcontext.RuleChange{LocalityChanged: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			older := &pushPlan{req: &model.PushRequest{Full: true}, rules: map[string]pushcontext.RuleChange{host: tt.older}}
			newer := &pushPlan{req: &model.PushRequest{Full: true}, rules: map[string]pushcontext.RuleChange{host: tt.newer}}
			if got := mergePlans(3, older, newer).rules[host]; got != tt.want {
				t.Errorf("merged change = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// scopePEM is a throwaway self-signed certificate and its key.
type scopePEM struct{ cert, key []byte }

func scopeTestPEM(t *testing.T, host string) scopePEM {
	t.Helper()
	p, err := newScopePEM(host)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newScopePEM(host string) (scopePEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return scopePEM{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return scopePEM{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return scopePEM{}, err
	}
	return scopePEM{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func upsertTLSSecret(s model.Store, name string, p scopePEM) {
	s.UpsertSecret(&model.Secret{Name: name, Namespace: "default", Type: "kubernetes.io/tls", Cert: p.cert, PrivateKey: p.key})
}

func secretKey(name string) model.ConfigKey {
	return model.ConfigKey{Kind: model.KindSecret, Namespace: "default", Name: name}
}

// upsertIngress writes Ingress default/web: host a.example.com with TLS from
// Secret a-cert, and one Prefix path per entry of paths, each to the service
// the path names ("/private" to private, anything else to a).
func upsertIngress(s model.Store, paths ...string) {
	rule := model.IngressRule{Host: "a.example.com"}
	for _, p := range paths {
		svc := strings.TrimPrefix(p, "/")
		rule.Paths = append(rule.Paths, model.IngressPath{Path: p, PathType: model.PathTypePrefix,
			Backend: model.IngressBackend{ServiceName: svc, PortNumber: 80}})
	}
	s.UpsertIngress(&model.Ingress{Name: "web", Namespace: "default", ClassName: "istio",
		Revision: strings.Join(paths, ","), CreationTime: ruleCreated,
		Rules: []model.IngressRule{rule},
		TLS:   []model.IngressTLS{{Hosts: []string{"a.example.com"}, SecretName: "a-cert"}}})
}

// upsertGatewayService writes the gateway Service, its HTTPS port targeting
// httpsTarget.
func upsertGatewayService(s model.Store, httpsTarget uint32) {
	s.UpsertService(&model.Service{Name: "istio-ingressgateway", Namespace: "istio-system",
		Hostname: "istio-ingressgateway.istio-system." + domain, Selector: map[string]string{"istio": "ingressgateway"},
		Ports: []*model.Port{
			{Name: "http2", Port: 80, Protocol: model.ProtocolHTTP2, TargetPort: 8080},
			{Name: "https", Port: 443, Protocol: model.ProtocolHTTPS, TargetPort: httpsTarget},
		}})
}

// gatewayNode is the node of an ingress gateway replica.
func gatewayNode() *corev3.Node {
	meta, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": "istio-system",
		"LABELS":    map[string]any{"istio": "ingressgateway", "app": "istio-ingressgateway"},
	})
	if err != nil {
		panic(err)
	}
	return &corev3.Node{Id: "router~10.0.0.9~gateway.istio-system~istio-system.svc.cluster.local", Metadata: meta}
}

// TestFullPlanFollowsEndpointWorkloads: in a full push, an endpoint change
// regenerates WDS when the service has, or had, endpoints that name no Pod
// (they are workloads of their own there), or has no selector (the Pods
// its endpoints name serve it only through them), and only then.
func TestFullPlanFollowsEndpointWorkloads(t *testing.T) {
	endpoints := func(fromPod bool, ips ...string) []*model.Endpoint {
		var out []*model.Endpoint
		for _, ip := range ips {
			out = append(out, &model.Endpoint{Address: ip, Port: 8080, ServicePortName: "http", Namespace: "default", FromPod: fromPod})
		}
		return out
	}
	selected := map[string]string{"app": "db"}
	for _, tc := range []struct {
		name        string
		selector    map[string]string
		before, now []*model.Endpoint
		want        bool
	}{
		{"endpoints without a Pod appear", selected, nil, endpoints(false, "192.168.0.1"), true},
		{"endpoints without a Pod go", selected, endpoints(false, "192.168.0.1"), nil, true},
		{"Pods' endpoints change", selected, endpoints(true, "10.0.0.1"), endpoints(true, "10.0.0.2"), false},
		{"Pods' endpoints of a selector-less service change", nil, endpoints(true, "10.0.0.1"), endpoints(true, "10.0.0.2"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := model.NewStore()
			store.UpsertService(&model.Service{Name: "db", Namespace: "default", Hostname: hostname("db"), Selector: tc.selector,
				Ports: []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}}})
			store.SetEndpoints(serviceKey("db"), "db-slice", tc.before)
			prev := pushcontext.Build(store, pushcontext.Options{}, nil, nil)
			store.SetEndpoints(serviceKey("db"), "db-slice", tc.now)
			key := model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: "db"}
			req := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{key: {}}}
			cur := pushcontext.Build(store, pushcontext.Options{}, prev, req)
			if got := newPushPlan(1, req, prev, cur).addressesChanged; got != tc.want {
				t.Errorf("WDS regenerated: %v, want %v", got, tc.want)
			}
		})
	}
}
