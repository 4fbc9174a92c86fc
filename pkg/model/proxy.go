package model

// NodeType is the role of a connected proxy, from the first field of its
// node ID (sidecar~ip~pod.ns~ns.svc.cluster.local).
type NodeType string

const (
	SidecarProxy NodeType = "sidecar"
	Router       NodeType = "router"
	// NodeProxy is a per-node proxy of ambient mode, Istio's "ztunnel":
	// it is served workload discovery, over delta ADS.
	NodeProxy NodeType = "ztunnel"
)

// Proxy is a connected xDS client, as parsed from its node.
type Proxy struct {
	ID          string
	Type        NodeType
	IPAddresses []string
	// Namespace is where the proxy's config is looked up from.
	Namespace string
	DNSDomain string
	Labels    map[string]string
	Locality  Locality
	ClusterID string
	// Generator names the generator set the client asked for in its
	// metadata (Istio's GENERATOR, "grpc" for proxyless gRPC).
	Generator string
	// IstioVersion is the version the proxy reports (ISTIO_VERSION), shown
	// by the debug endpoints and istioctl proxy-status.
	IstioVersion string
	// VerifiedIdentity is who the client proved to be (a certificate from
	// the mesh CA, or a ServiceAccount token), nil on a plaintext stream.
	// Unlike the fields above, it does not come from what the node claims.
	VerifiedIdentity *Identity
}

// Identity is a workload's SPIFFE identity,
// spiffe://<trust domain>/ns/<namespace>/sa/<service account>.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

func (id Identity) String() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// WatchedResource is what a client subscribes to for one type URL.
type WatchedResource struct {
	TypeURL string
	// ResourceNames is sorted. With Wildcard set, the client wants every
	// resource of the type, and ResourceNames adds explicit ones.
	ResourceNames []string
	Wildcard      bool
}
