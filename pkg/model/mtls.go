package model

// MTLSMode is what a workload's inbound side accepts, in the terms of
// PeerAuthentication (security.istio.io). Configs carry the mode as they
// set it; the push context resolves Unset through Istio's precedence, so
// what it hands to generators is never Unset.
type MTLSMode uint8

const (
	// MTLSUnset inherits the mode of the level above (workload → namespace
	// → mesh); at mesh level it means Permissive.
	MTLSUnset MTLSMode = iota
	// MTLSDisable accepts plaintext only.
	MTLSDisable
	// MTLSPermissive accepts mutual TLS and plaintext.
	MTLSPermissive
	// MTLSStrict accepts mutual TLS only.
	MTLSStrict
)

func (m MTLSMode) String() string {
	switch m {
	case MTLSDisable:
		return "DISABLE"
	case MTLSPermissive:
		return "PERMISSIVE"
	case MTLSStrict:
		return "STRICT"
	default:
		return "UNSET"
	}
}

// The label the injector puts on pods whose sidecar terminates mutual TLS.
// Auto mTLS sends mutual TLS only to endpoints that carry it.
const (
	TLSModeLabel = "security.istio.io/tlsMode"
	TLSModeIstio = "istio"
)

// LabelledForMTLS reports whether a workload's labels mark its sidecar as
// terminating mutual TLS.
func LabelledForMTLS(labels map[string]string) bool {
	return labels[TLSModeLabel] == TLSModeIstio
}
