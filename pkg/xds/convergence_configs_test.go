package xds

import (
	"fmt"
	"math/rand/v2"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// The convergence test's Istio configuration steps: DestinationRules,
// VirtualServices and PeerAuthentications (see convergence_world_test.go).

// convRuleSlot is a DestinationRule slot; hosts are the host forms its
// rule may name (short names resolve in the rule's namespace).
type convRuleSlot struct {
	ns, name string
	hosts    []string
}

var convRuleSlots = func() []convRuleSlot {
	var out []convRuleSlot
	for _, s := range convServices {
		out = append(out, convRuleSlot{s.ns, s.name, []string{s.name, s.host()}})
	}
	return append(out,
		// A rule of web's own for a host of apps, which web's proxies
		// prefer to apps' rule when it is not exported beyond web.
		convRuleSlot{convWeb, "a-in-web", []string{convServices[0].host()}},
		// A wildcard in the root namespace: the fallback of every host of web.
		convRuleSlot{convRoot, "web-wide", []string{"*.web.svc.cluster.local"}},
	)
}()

var convSimpleLBs = []networking.LoadBalancerSettings_SimpleLB{
	networking.LoadBalancerSettings_ROUND_ROBIN, networking.LoadBalancerSettings_LEAST_REQUEST,
	networking.LoadBalancerSettings_RANDOM, networking.LoadBalancerSettings_PASSTHROUGH,
}

func convRuleStep(r *rand.Rand) convStep {
	slot := oneOf(r, convRuleSlots...)
	key := model.ConfigKey{Kind: model.KindDestinationRule, Namespace: slot.ns, Name: slot.name}
	if chance(r, 5) {
		return convStep{desc: "delete DestinationRule " + slot.ns + "/" + slot.name, apply: func(st model.Store) { st.DeleteConfig(key) }}
	}
	dr := &networking.DestinationRule{
		Host:          oneOf(r, slot.hosts...),
		TrafficPolicy: convTrafficPolicy(r),
		ExportTo:      oneOf(r, nil, []string{"."}, []string{convApps}, []string{"*"}),
	}
	if chance(r, 4) {
		// Only for the proxies of the rule's namespace it selects, which
		// alone among sidecars take its credentialName; so it may not be
		// exported beyond the namespace.
		dr.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: oneOf(r,
			map[string]string{"app": "client"}, map[string]string{"istio": "ingressgateway"})}
		dr.ExportTo = oneOf(r, nil, []string{"."})
	}
	for _, name := range oneOf(r, nil, []string{"v1"}, []string{"v1", "v2"}) {
		subset := &networking.Subset{Name: name, Labels: map[string]string{"version": name}}
		if chance(r, 3) {
			subset.TrafficPolicy = convTrafficPolicy(r)
		}
		dr.Subsets = append(dr.Subsets, subset)
	}
	cfg := &model.Config{Kind: model.KindDestinationRule, Namespace: slot.ns, Name: slot.name, CreationTime: ruleCreated, Spec: dr}
	return convStep{desc: fmt.Sprintf("DestinationRule %s/%s {%v}", slot.ns, slot.name, dr),
		apply: func(st model.Store) { st.UpsertConfig(cfg) }}
}

// convTrafficPolicy draws a traffic policy, or none.
func convTrafficPolicy(r *rand.Rand) *networking.TrafficPolicy {
	if chance(r, 4) {
		return nil
	}
	tp := &networking.TrafficPolicy{}
	switch n := r.IntN(len(convSimpleLBs) + 2); {
	case n < len(convSimpleLBs):
		tp.LoadBalancer = &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: convSimpleLBs[n]}}
	case n == len(convSimpleLBs):
		tp.LoadBalancer = &networking.LoadBalancerSettings{LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{
			ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: oneOf(r, "x-user", "x-session")}}}}
	}
	if chance(r, 3) {
		tp.ConnectionPool = &networking.ConnectionPoolSettings{Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 1 + r.Int32N(3)}}
	}
	if chance(r, 3) {
		tp.Tls = &networking.ClientTLSSettings{Mode: oneOf(r, networking.ClientTLSSettings_ISTIO_MUTUAL,
			networking.ClientTLSSettings_DISABLE, networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL,
			networking.ClientTLSSettings_MUTUAL)}
		// MUTUAL needs a certificate: from the credential, as no file
		// paths are given. SIMPLE may take its CA from it.
		switch tp.Tls.Mode {
		case networking.ClientTLSSettings_MUTUAL:
			tp.Tls.CredentialName = oneOf(r, convCredential, pushcontext.CredentialPrefix+convCredential)
		case networking.ClientTLSSettings_SIMPLE:
			tp.Tls.CredentialName = oneOf(r, "", convCredential, convCredential)
		}
	}
	if chance(r, 4) {
		tp.OutlierDetection = &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(oneOf(r, uint32(3), 5))}
	}
	return tp
}

// convVirtualServiceSlots are the VirtualService slots and the host each
// routes.
var convVirtualServiceSlots = []struct{ ns, name, host string }{
	{convApps, "a-routes", "a"},
	{convApps, "b-routes", convServices[1].host()},
	{convWeb, "d-routes", "d"},
}

func convVirtualServiceStep(r *rand.Rand) convStep {
	slot := oneOf(r, convVirtualServiceSlots...)
	key := model.ConfigKey{Kind: model.KindVirtualService, Namespace: slot.ns, Name: slot.name}
	if chance(r, 4) {
		return convStep{desc: "delete VirtualService " + slot.ns + "/" + slot.name, apply: func(st model.Store) { st.DeleteConfig(key) }}
	}
	to := func(host, subset string, weight int32) *networking.HTTPRouteDestination {
		return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Subset: subset}, Weight: weight}
	}
	// Another slot's Service may be one the proxies cannot see (exportTo):
	// the routes still name its cluster.
	other := oneOf(r, convServices...).host()
	var route []*networking.HTTPRoute
	switch r.IntN(4) {
	case 0:
		route = []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{to(slot.host, "v1", 0)}}}
	case 1:
		route = []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{to(slot.host, "v1", 80), to(slot.host, "v2", 20)}}}
	case 2:
		route = []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{to(other, "", 0)}}}
	default:
		route = []*networking.HTTPRoute{
			{Match: []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: "/api"}}}},
				Route: []*networking.HTTPRouteDestination{to(other, oneOf(r, "", "v2"), 0)}},
			{Route: []*networking.HTTPRouteDestination{to(slot.host, "", 0)}},
		}
	}
	vs := &networking.VirtualService{Hosts: []string{slot.host}, Http: route, ExportTo: oneOf(r, nil, []string{"."})}
	cfg := &model.Config{Kind: model.KindVirtualService, Namespace: slot.ns, Name: slot.name, CreationTime: ruleCreated, Spec: vs}
	return convStep{desc: fmt.Sprintf("VirtualService %s/%s {%v}", slot.ns, slot.name, vs),
		apply: func(st model.Store) { st.UpsertConfig(cfg) }}
}

// convPeerAuthnSlots: mesh-wide, namespace-wide, and one selecting the v1
// workloads of apps (endpoints, and the client Pod when it is v1).
var convPeerAuthnSlots = []struct {
	ns, name string
	selector map[string]string
}{
	{convRoot, "default", nil},
	{convApps, "default", nil},
	{convWeb, "default", nil},
	{convApps, "v1", map[string]string{"version": "v1"}},
}

var convMTLSModes = []security.PeerAuthentication_MutualTLS_Mode{
	security.PeerAuthentication_MutualTLS_UNSET, security.PeerAuthentication_MutualTLS_DISABLE,
	security.PeerAuthentication_MutualTLS_PERMISSIVE, security.PeerAuthentication_MutualTLS_STRICT,
}

func convPeerAuthnStep(r *rand.Rand) convStep {
	slot := oneOf(r, convPeerAuthnSlots...)
	key := model.ConfigKey{Kind: model.KindPeerAuthentication, Namespace: slot.ns, Name: slot.name}
	if chance(r, 4) {
		return convStep{desc: "delete PeerAuthentication " + slot.ns + "/" + slot.name, apply: func(st model.Store) { st.DeleteConfig(key) }}
	}
	pa := &security.PeerAuthentication{Mtls: &security.PeerAuthentication_MutualTLS{Mode: oneOf(r, convMTLSModes...)}}
	if slot.selector != nil {
		pa.Selector = &typev1beta1.WorkloadSelector{MatchLabels: slot.selector}
		if chance(r, 3) {
			// Port-level settings apply only beside a selector.
			pa.PortLevelMtls = map[uint32]*security.PeerAuthentication_MutualTLS{8080: {Mode: oneOf(r, convMTLSModes...)}}
		}
	}
	cfg := &model.Config{Kind: model.KindPeerAuthentication, Namespace: slot.ns, Name: slot.name, CreationTime: ruleCreated, Spec: pa}
	return convStep{desc: fmt.Sprintf("PeerAuthentication %s/%s {%v}", slot.ns, slot.name, pa),
		apply: func(st model.Store) { st.UpsertConfig(cfg) }}
}
