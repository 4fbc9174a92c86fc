package pushcontext

import (
	"slices"

	security "istio.io/api/security/v1beta1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// MTLSPolicy is the mutual TLS a workload's inbound side applies, resolved
// from the PeerAuthentications that reach it. Its modes are never Unset.
type MTLSPolicy struct {
	// Mode applies to every port that Ports does not name.
	Mode model.MTLSMode
	// Ports are the workload's (target) ports that a port-level setting
	// overrides, sorted by port. Shared: never mutate.
	Ports []PortMTLS
}

// PortMTLS is one port-level override.
type PortMTLS struct {
	Port uint32
	Mode model.MTLSMode
}

// ForPort is the mode of one workload port.
func (m MTLSPolicy) ForPort(port uint32) model.MTLSMode {
	for _, p := range m.Ports {
		if p.Port == port {
			return p.Mode
		}
	}
	return m.Mode
}

// Equal compares two policies.
func (m MTLSPolicy) Equal(o MTLSPolicy) bool {
	return m.Mode == o.Mode && slices.Equal(m.Ports, o.Ports)
}

// peerAuthnIndex holds the PeerAuthentications in Istio's three levels.
// Where a level has several candidates, the oldest (then the first by name)
// wins, as in Istio, so the outcome does not depend on arrival order.
type peerAuthnIndex struct {
	// mesh is the oldest selector-less policy in the root namespace.
	mesh *model.Config
	// namespaces holds the oldest selector-less policy of each other
	// namespace.
	namespaces map[string]*model.Config
	// selected are each namespace's policies with a selector, oldest
	// first. Istio ignores those in the root namespace, and so do we.
	selected map[string][]*model.Config
}

func buildPeerAuthnIndex(configs []*model.Config, rootNamespace string) *peerAuthnIndex {
	idx := &peerAuthnIndex{namespaces: map[string]*model.Config{}, selected: map[string][]*model.Config{}}
	sorted := slices.Clone(configs)
	slices.SortFunc(sorted, olderFirst)
	for _, cfg := range sorted {
		spec, ok := cfg.Spec.(*security.PeerAuthentication)
		if !ok {
			continue
		}
		switch {
		case len(spec.GetSelector().GetMatchLabels()) > 0:
			if cfg.Namespace != rootNamespace {
				idx.selected[cfg.Namespace] = append(idx.selected[cfg.Namespace], cfg)
			}
		case cfg.Namespace == rootNamespace:
			if idx.mesh == nil {
				idx.mesh = cfg
			}
		default:
			if idx.namespaces[cfg.Namespace] == nil {
				idx.namespaces[cfg.Namespace] = cfg
			}
		}
	}
	return idx
}

func olderFirst(a, b *model.Config) int {
	if c := a.CreationTime.Compare(b.CreationTime); c != 0 {
		return c
	}
	if a.Namespace != b.Namespace {
		if a.Namespace < b.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}

// namespaceMode resolves the mesh and namespace levels: each set mode
// overrides the one above, and Permissive is the default.
func (idx *peerAuthnIndex) namespaceMode(ns string) model.MTLSMode {
	mode := model.MTLSPermissive
	if m := specMode(idx.mesh); m != model.MTLSUnset {
		mode = m
	}
	if m := specMode(idx.namespaces[ns]); m != model.MTLSUnset {
		mode = m
	}
	return mode
}

// workloadPolicy adds the oldest selector policy that matches labels, and
// its port-level settings (an Unset port inherits the workload's mode).
func (idx *peerAuthnIndex) workloadPolicy(ns string, labels map[string]string) MTLSPolicy {
	policy := MTLSPolicy{Mode: idx.namespaceMode(ns)}
	for _, cfg := range idx.selected[ns] {
		spec := cfg.Spec.(*security.PeerAuthentication)
		if !selects(spec.GetSelector().GetMatchLabels(), labels) {
			continue
		}
		if m := convertMode(spec.GetMtls()); m != model.MTLSUnset {
			policy.Mode = m
		}
		for port, mtls := range spec.GetPortLevelMtls() {
			mode := convertMode(mtls)
			if mode == model.MTLSUnset {
				mode = policy.Mode
			}
			policy.Ports = append(policy.Ports, PortMTLS{Port: port, Mode: mode})
		}
		slices.SortFunc(policy.Ports, func(a, b PortMTLS) int { return int(a.Port) - int(b.Port) })
		break
	}
	return policy
}

// hasSelected reports whether some policy with a selector may set the
// mode of a workload in namespace ns apart from the namespace's.
func (idx *peerAuthnIndex) hasSelected(ns string) bool {
	return idx != nil && len(idx.selected[ns]) > 0
}

// anySelected reports whether some namespace has a policy with a selector.
func (idx *peerAuthnIndex) anySelected() bool {
	return len(idx.selected) > 0
}

// autoMTLSEndpoints returns eps with MTLS cleared on the endpoints whose
// own workload policy disables mutual TLS on the port they serve, as
// Istio's EDS does: such a sidecar hands TLS to the application as it
// came, so auto mTLS must send it plaintext. Only the endpoints of
// namespaces with selector policies are looked at: elsewhere the mode is
// the namespace's, and a namespace-wide DISABLE already keeps auto mTLS off
// for the whole service (peerTLSFor in envoygen). It returns eps itself
// when nothing changes.
func (idx *peerAuthnIndex) autoMTLSEndpoints(eps []*model.Endpoint) []*model.Endpoint {
	var out []*model.Endpoint
	for i, ep := range eps {
		if !ep.MTLS || !idx.hasSelected(ep.Namespace) ||
			idx.workloadPolicy(ep.Namespace, ep.Labels).ForPort(ep.Port) != model.MTLSDisable {
			if out != nil {
				out = append(out, ep)
			}
			continue
		}
		if out == nil {
			out = make([]*model.Endpoint, i, len(eps))
			copy(out, eps[:i])
		}
		plain := *ep
		plain.MTLS = false
		out = append(out, &plain)
	}
	if out == nil {
		return eps
	}
	return out
}

func specMode(cfg *model.Config) model.MTLSMode {
	if cfg == nil {
		return model.MTLSUnset
	}
	return convertMode(cfg.Spec.(*security.PeerAuthentication).GetMtls())
}

func convertMode(m *security.PeerAuthentication_MutualTLS) model.MTLSMode {
	switch m.GetMode() {
	case security.PeerAuthentication_MutualTLS_DISABLE:
		return model.MTLSDisable
	case security.PeerAuthentication_MutualTLS_PERMISSIVE:
		return model.MTLSPermissive
	case security.PeerAuthentication_MutualTLS_STRICT:
		return model.MTLSStrict
	}
	return model.MTLSUnset
}

// InboundMTLS is the mutual TLS that PeerAuthentications set for a
// workload with labels in namespace ns, by Istio's precedence: a
// workload-selecting policy over the namespace's over the mesh's (the root
// namespace's), an Unset mode inheriting from the level above, and
// Permissive where nothing is set.
func (pc *PushContext) InboundMTLS(ns string, labels map[string]string) MTLSPolicy {
	return pc.peerAuthn.workloadPolicy(ns, labels)
}

// NamespaceMTLSMode is the mode of namespace ns before workload-level
// policies: what a client can tell about a service's servers without
// looking at each of them, as Istio's auto mTLS does.
func (pc *PushContext) NamespaceMTLSMode(ns string) model.MTLSMode {
	return pc.peerAuthn.namespaceMode(ns)
}
