package pushcontext

import (
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// DestinationRule is the rule that applies to one host as seen from one
// namespace: one DestinationRule, or several for the same host merged.
type DestinationRule struct {
	Spec *networking.DestinationRule // merged; shared; never mutate
	From []model.NamespacedName      // the rules merged into Spec, oldest first
}

// Subset returns the named subset or nil.
func (dr *DestinationRule) Subset(name string) *networking.Subset {
	if dr == nil || dr.Spec == nil {
		return nil
	}
	for _, s := range dr.Spec.Subsets {
		if s.GetName() == name {
			return s
		}
	}
	return nil
}

// TrafficPolicy returns the policy for one port and subset, resolved as
// Istio's MergeSubsetTrafficPolicy does. First the top-level policy, where a
// portLevelSettings entry for the port replaces the load balancer,
// connection pool, outlier detection and TLS as a whole: port-level entries
// do not inherit, so what an entry leaves unset is unset. Then, for a subset
// with a policy, that policy overrides the fields it sets, except that a
// portLevelSettings entry of the subset for the port replaces those four
// fields as a whole, resetting what it leaves unset, whatever the top level
// or the subset's own policy says. Tunnel, proxy protocol and retry budget
// are not port-level settings: the subset's, else the top level's, apply.
// It returns nil when nothing applies. The result is shared with Spec where
// nothing needed changing and must never be mutated; a result that differs
// from Spec is a new message whose unchanged fields still point into Spec.
// Port-level settings never appear in the result: it is already resolved for
// the port.
func (dr *DestinationRule) TrafficPolicy(port uint32, subset string) *networking.TrafficPolicy {
	if dr == nil || dr.Spec == nil {
		return nil
	}
	base, _ := policyForPort(dr.Spec.TrafficPolicy, port)
	if subset == "" {
		return base
	}
	s := dr.Subset(subset)
	if s == nil || s.TrafficPolicy == nil {
		return base
	}
	over, overIsPortLevel := policyForPort(s.TrafficPolicy, port)
	if base == nil {
		return over
	}
	return overlayPolicy(base, over, overIsPortLevel)
}

// policyForPort resolves a policy's portLevelSettings for one port, and
// reports whether an entry for the port was found.
func policyForPort(tp *networking.TrafficPolicy, port uint32) (*networking.TrafficPolicy, bool) {
	if tp == nil {
		return nil, false
	}
	if len(tp.PortLevelSettings) == 0 {
		return tp, false
	}
	resolved := &networking.TrafficPolicy{
		LoadBalancer:     tp.LoadBalancer,
		ConnectionPool:   tp.ConnectionPool,
		OutlierDetection: tp.OutlierDetection,
		Tls:              tp.Tls,
		Tunnel:           tp.Tunnel,
		ProxyProtocol:    tp.ProxyProtocol,
		RetryBudget:      tp.RetryBudget,
	}
	for _, p := range tp.PortLevelSettings {
		if p.GetPort() != nil && p.GetPort().GetNumber() == port {
			resolved.LoadBalancer = p.LoadBalancer
			resolved.ConnectionPool = p.ConnectionPool
			resolved.OutlierDetection = p.OutlierDetection
			resolved.Tls = p.Tls
			return resolved, true
		}
	}
	return resolved, false
}

// overlayPolicy returns base with every field that over sets replaced. When
// over comes from a port-level entry, its four port-level fields replace
// base's even when unset.
func overlayPolicy(base, over *networking.TrafficPolicy, overIsPortLevel bool) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{
		LoadBalancer:     portField(over.LoadBalancer, base.LoadBalancer, overIsPortLevel),
		ConnectionPool:   portField(over.ConnectionPool, base.ConnectionPool, overIsPortLevel),
		OutlierDetection: portField(over.OutlierDetection, base.OutlierDetection, overIsPortLevel),
		Tls:              portField(over.Tls, base.Tls, overIsPortLevel),
		Tunnel:           pick(over.Tunnel, base.Tunnel),
		ProxyProtocol:    pick(over.ProxyProtocol, base.ProxyProtocol),
		RetryBudget:      pick(over.RetryBudget, base.RetryBudget),
	}
}

func portField[T any](over, base *T, overIsPortLevel bool) *T {
	if overIsPortLevel {
		return over
	}
	return pick(over, base)
}

func pick[T any](preferred, fallback *T) *T {
	if preferred != nil {
		return preferred
	}
	return fallback
}

// MentionsPassthrough reports whether any policy of spec (top level, port
// level, subsets) sets loadBalancer PASSTHROUGH: a cheap test that spares
// resolving the policy of every cluster of every other rule.
func MentionsPassthrough(spec *networking.DestinationRule) bool {
	passthrough := func(tp *networking.TrafficPolicy) bool {
		if tp.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH {
			return true
		}
		for _, pl := range tp.GetPortLevelSettings() {
			if pl.GetLoadBalancer().GetSimple() == networking.LoadBalancerSettings_PASSTHROUGH {
				return true
			}
		}
		return false
	}
	if passthrough(spec.GetTrafficPolicy()) {
		return true
	}
	for _, s := range spec.GetSubsets() {
		if passthrough(s.GetTrafficPolicy()) {
			return true
		}
	}
	return false
}

// MayPassThrough reports whether some DestinationRule for hostname, in any
// namespace, sends a cluster of it to original destinations. Only then does
// a cluster of the service depend on AllEndpointsMTLS.
func (pc *PushContext) MayPassThrough(hostname string) bool {
	for _, h := range pc.rules.passthroughHosts {
		if h == hostname || (isWildcard(h) && strings.HasSuffix(hostname, h[1:])) {
			return true
		}
	}
	return false
}
