package envoygen

import (
	"sync"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Field numbers of the parts of an EDS cluster that differ between services.
const (
	clusterNameField      = 1 // Cluster.name
	clusterEDSConfigField = 3 // Cluster.eds_cluster_config
	edsServiceNameField   = 2 // Cluster.EdsClusterConfig.service_name
)

// clusterTemplates marshal the clusters of services without a
// DestinationRule by splicing: such clusters differ only in their name (and
// the EDS service name, the same string) and, under auto mTLS, in their
// transport socket matches (which name the service's SNI and identities).
// The rest is marshalled once per port protocol and proxy kind; the names
// are prepended and the matches appended. Protobuf merges concatenated
// fields, so the bytes decode to exactly the cluster buildOutboundCluster
// makes.
type clusterTemplates struct {
	mu     sync.RWMutex
	byKind map[templateKey]*clusterTemplate
}

type templateKey struct {
	protocol  model.Protocol
	proxyType model.NodeType
}

type clusterTemplate struct {
	// rest is the cluster without name and EDS config; edsConfig is the
	// EdsClusterConfig without service name.
	rest, edsConfig []byte
	// h2 is whether the cluster speaks HTTP/2 upstream, which its mutual
	// TLS announces in ALPN.
	h2 bool
}

func (t *clusterTemplates) get(protocol model.Protocol, proxyType model.NodeType) *clusterTemplate {
	key := templateKey{protocol, proxyType}
	t.mu.RLock()
	tmpl := t.byKind[key]
	t.mu.RUnlock()
	if tmpl != nil {
		return tmpl
	}
	probe := outboundCluster{
		svc:       &model.Service{Hostname: "template"},
		port:      &model.Port{Port: 1, Protocol: protocol},
		proxyType: proxyType,
	}
	c := buildOutboundCluster(probe, problemReporter{})
	// A plain cluster speaks HTTP/2 by its port's protocol alone (no rule
	// upgrades it).
	pb := &clusterBuilder{c: &cluster.Cluster{}}
	pb.setUpstreamProtocol(protocol, proxyType == model.SidecarProxy)
	h2 := pb.http2Options() != nil
	eds := c.EdsClusterConfig
	c.Name, c.EdsClusterConfig = "", nil
	eds.ServiceName = ""
	opts := proto.MarshalOptions{Deterministic: true}
	rest, err := opts.Marshal(c)
	if err != nil {
		panic("envoygen: marshal cluster template: " + err.Error())
	}
	edsBytes, err := opts.Marshal(eds)
	if err != nil {
		panic("envoygen: marshal cluster template: " + err.Error())
	}
	tmpl = &clusterTemplate{rest: rest, edsConfig: edsBytes, h2: h2}
	t.mu.Lock()
	if t.byKind == nil {
		t.byKind = map[templateKey]*clusterTemplate{}
	}
	t.byKind[key] = tmpl
	t.mu.Unlock()
	return tmpl
}

// resource returns the marshalled cluster of o, a plain cluster.
func (tmpl *clusterTemplate) resource(o outboundCluster) model.Resource {
	name := OutboundClusterName(o.svc.Hostname, o.port.Port, "")
	var matches []byte
	if o.peer.auto {
		matches = appendAutoMTLSMatches(nil, o.peer.identities.List(), istioMutualSNI(o.svc.Hostname, o.port.Port, ""), tmpl.h2)
	}
	edsLen := len(tmpl.edsConfig) + protowire.SizeTag(edsServiceNameField) + protowire.SizeBytes(len(name))
	size := protowire.SizeTag(clusterNameField) + protowire.SizeBytes(len(name)) +
		protowire.SizeTag(clusterEDSConfigField) + protowire.SizeBytes(edsLen) + len(tmpl.rest) + len(matches)
	b := make([]byte, 0, size)
	b = protowire.AppendTag(b, clusterNameField, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = protowire.AppendTag(b, clusterEDSConfigField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(edsLen))
	b = append(b, tmpl.edsConfig...)
	b = protowire.AppendTag(b, edsServiceNameField, protowire.BytesType)
	b = protowire.AppendString(b, name)
	b = append(b, tmpl.rest...)
	b = append(b, matches...)
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: ClusterType, Value: b}}
}

// plainCluster reports whether o is built from defaults only, so that its
// template applies.
func plainCluster(o outboundCluster) bool {
	return o.rule == nil && o.subset == ""
}
