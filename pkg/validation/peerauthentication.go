package validation

import (
	"fmt"
	"maps"
	"slices"

	security "istio.io/api/security/v1beta1"
)

// ValidatePeerAuthentication returns every problem with a PeerAuthentication
// (security.istio.io v1 or v1beta1, which share this spec), or nil. name and
// namespace are the object's metadata.
//
// The namespace does not change what is valid: in the root namespace a
// policy without a selector is the mesh-wide default and one with a selector
// is a workload policy, as in any other namespace.
func ValidatePeerAuthentication(name, namespace string, pa *security.PeerAuthentication) error {
	var p problems
	p.objectMeta(name, namespace)
	if pa == nil {
		p.add("spec", "is required")
		return p.err()
	}
	// Unlike a DestinationRule's workloadSelector, an empty selector is
	// allowed (Istio accepts it): it selects nothing in particular, so the
	// policy acts as the namespace's.
	p.labels("spec.selector.matchLabels", pa.GetSelector().GetMatchLabels())
	if m := pa.GetMtls(); m != nil {
		p.mtlsMode("spec.mtls.mode", m.GetMode())
	}
	p.portLevelMTLS(pa.GetPortLevelMtls(), len(pa.GetSelector().GetMatchLabels()) > 0)
	return p.err()
}

// portLevelMTLS checks per-port modes. They need a selector with labels:
// a port number means something only on the workloads it names, so
// mesh-wide and namespace-wide policies cannot set them.
func (p *problems) portLevelMTLS(ports map[uint32]*security.PeerAuthentication_MutualTLS, selected bool) {
	const path = "spec.portLevelMtls"
	if ports == nil {
		return
	}
	if len(ports) == 0 {
		p.add(path, "must list at least one port when set")
		return
	}
	if !selected {
		p.add(path, "needs a selector with at least one label: mesh-wide and namespace-wide policies cannot set port-level mTLS")
	}
	for _, port := range slices.Sorted(maps.Keys(ports)) {
		portPath := fmt.Sprintf("%s[%d]", path, port)
		p.checkPort(portPath, port)
		// An entry without a mode ("80": {}) inherits, like UNSET.
		p.mtlsMode(portPath+".mode", ports[port].GetMode())
	}
}

func (p *problems) mtlsMode(path string, mode security.PeerAuthentication_MutualTLS_Mode) {
	if _, ok := security.PeerAuthentication_MutualTLS_Mode_name[int32(mode)]; !ok {
		p.add(path, "unknown mode %d: must be UNSET, DISABLE, PERMISSIVE or STRICT", mode)
	}
}
