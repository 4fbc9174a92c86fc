package envoygen

import (
	"sync"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// clusterNameField is the number of Cluster.name, the one field of a plain
// cluster's own besides its transport socket matches.
const clusterNameField = 1

// clusterTemplates marshal the clusters of services without a
// DestinationRule by splicing: such clusters differ only in their name and,
// under auto mTLS, in their transport socket matches (which name the
// service's SNI and identities). The rest is marshalled once per port
// protocol and proxy kind; the name is prepended and the matches appended.
// Protobuf merges concatenated fields, so the bytes decode to exactly the
// cluster buildOutboundCluster makes.
type clusterTemplates struct {
	mu     sync.RWMutex
	byKind map[templateKey]*clusterTemplate
}

type templateKey struct {
	protocol  model.Protocol
	proxyType model.NodeType
}

type clusterTemplate struct {
	// rest is the cluster without its name.
	rest []byte
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
	c.Name = ""
	tmpl = &clusterTemplate{rest: marshalDeterministic(c), h2: h2}
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
	size := sizeString(clusterNameField, name) + len(tmpl.rest)
	// The matches are written in place: the cluster is allocated once, at
	// its final size.
	var matches autoMTLSLayout
	if o.peer.auto {
		matches = layoutAutoMTLSMatches(o.peer.identities.List(), istioMutualSNI(o.svc.Hostname, o.port.Port, ""), tmpl.h2)
		size += matches.size()
	}
	b := make([]byte, 0, size)
	b = appendString(b, clusterNameField, name)
	b = append(b, tmpl.rest...)
	if o.peer.auto {
		b = appendAutoMTLSMatches(b, &matches)
	}
	return model.Resource{Name: name, Resource: &anypb.Any{TypeUrl: ClusterType, Value: b}}
}

// plainCluster reports whether o is built from defaults only, so that its
// template applies. A DNS service's cluster carries its name and port.
func plainCluster(o outboundCluster) bool {
	return o.rule == nil && o.subset == "" && !o.svc.IsExternalName()
}
