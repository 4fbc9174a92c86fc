package pushcontext

import (
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

// TrafficPolicy returns the policy for one port and subset, layered as Istio
// does: the top-level policy, with a portLevelSettings entry for the port
// replacing its load balancer, connection pool, outlier detection and TLS as
// a whole (port-level settings do not inherit); then, for a subset, the
// subset's own policy resolved for the port the same way, overriding field by
// field. It returns nil when nothing applies. The result is shared with Spec
// where nothing needed changing and must never be mutated; a result that
// differs from Spec is a new message whose unchanged fields still point into
// Spec. Port-level settings never appear in the result: it is already
// resolved for the port.
func (dr *DestinationRule) TrafficPolicy(port uint32, subset string) *networking.TrafficPolicy {
	if dr == nil || dr.Spec == nil {
		return nil
	}
	base := policyForPort(dr.Spec.TrafficPolicy, port)
	if subset == "" {
		return base
	}
	s := dr.Subset(subset)
	if s == nil || s.TrafficPolicy == nil {
		return base
	}
	over := policyForPort(s.TrafficPolicy, port)
	if base == nil {
		return over
	}
	return overlayPolicy(base, over)
}

// policyForPort resolves a policy's portLevelSettings for one port.
func policyForPort(tp *networking.TrafficPolicy, port uint32) *networking.TrafficPolicy {
	if tp == nil {
		return nil
	}
	if len(tp.PortLevelSettings) == 0 {
		return tp
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
			// Istio: port-level policies do not inherit; unset fields fall
			// back to defaults, not to the top-level values.
			resolved.LoadBalancer = p.LoadBalancer
			resolved.ConnectionPool = p.ConnectionPool
			resolved.OutlierDetection = p.OutlierDetection
			resolved.Tls = p.Tls
			break
		}
	}
	return resolved
}

// overlayPolicy returns base with every field that over sets replaced.
func overlayPolicy(base, over *networking.TrafficPolicy) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{
		LoadBalancer:     pick(over.LoadBalancer, base.LoadBalancer),
		ConnectionPool:   pick(over.ConnectionPool, base.ConnectionPool),
		OutlierDetection: pick(over.OutlierDetection, base.OutlierDetection),
		Tls:              pick(over.Tls, base.Tls),
		Tunnel:           pick(over.Tunnel, base.Tunnel),
		ProxyProtocol:    pick(over.ProxyProtocol, base.ProxyProtocol),
		RetryBudget:      pick(over.RetryBudget, base.RetryBudget),
	}
}

func pick[T any](preferred, fallback *T) *T {
	if preferred != nil {
		return preferred
	}
	return fallback
}
