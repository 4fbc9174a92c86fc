package xds

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Node metadata keys, Istio's names so that existing bootstraps work.
const (
	metaNamespace   = "NAMESPACE"
	metaInstanceIPs = "INSTANCE_IPS"
	metaLabels      = "LABELS"
	metaClusterID   = "CLUSTER_ID"
	metaGenerator   = "GENERATOR"
)

// parseNode turns the node of a stream's first request into a Proxy. The ID
// has Istio's shape, type~ip~pod.namespace~namespace.svc.domain.
func parseNode(node *corev3.Node) (*model.Proxy, error) {
	if node == nil {
		return nil, errors.New("the first request of a stream must carry a node")
	}
	// At most five parts: a client may send a megabyte of "~", which
	// Split would make a million strings of.
	parts := strings.SplitN(node.GetId(), "~", 5)
	if len(parts) != 4 {
		return nil, fmt.Errorf("node id %q: want type~ip~pod.namespace~namespace.svc.domain", clip(node.GetId()))
	}
	p := &model.Proxy{ID: node.GetId(), Type: model.NodeType(parts[0]), DNSDomain: parts[3]}
	if p.Type != model.SidecarProxy && p.Type != model.Router && p.Type != model.NodeProxy {
		return nil, fmt.Errorf("node id %q: type %q is not sidecar, router or ztunnel", clip(p.ID), clip(parts[0]))
	}

	meta := node.GetMetadata().GetFields()
	ips, err := stringField(meta, metaInstanceIPs)
	if err != nil {
		return nil, err
	}
	if ips == "" {
		ips = parts[1]
	}
	for ip := range strings.SplitSeq(ips, ",") {
		ip = strings.TrimSpace(ip)
		if _, err := netip.ParseAddr(ip); err != nil {
			return nil, fmt.Errorf("node %q: invalid IP address %q", clip(p.ID), clip(ip))
		}
		p.IPAddresses = append(p.IPAddresses, ip)
	}

	if p.Namespace, err = stringField(meta, metaNamespace); err != nil {
		return nil, err
	}
	if p.Namespace == "" {
		p.Namespace, _, _ = strings.Cut(parts[3], ".")
	}
	if p.Namespace == "" {
		return nil, fmt.Errorf("node %q: no namespace in metadata or id", clip(p.ID))
	}
	if p.ClusterID, err = stringField(meta, metaClusterID); err != nil {
		return nil, err
	}
	if p.Generator, err = stringField(meta, metaGenerator); err != nil {
		return nil, err
	}
	// Only shown in debug output, so a malformed value is ignored rather
	// than refused.
	p.IstioVersion = meta["ISTIO_VERSION"].GetStringValue()
	if p.Labels, err = labelsField(meta); err != nil {
		return nil, err
	}
	if l := node.GetLocality(); l != nil {
		p.Locality = model.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	}
	return p, nil
}

func stringField(meta map[string]*structpb.Value, key string) (string, error) {
	v, ok := meta[key]
	if !ok {
		return "", nil
	}
	s, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return "", fmt.Errorf("node metadata %s must be a string", key)
	}
	return s.StringValue, nil
}

func labelsField(meta map[string]*structpb.Value) (map[string]string, error) {
	v, ok := meta[metaLabels]
	if !ok {
		return nil, nil
	}
	s, ok := v.GetKind().(*structpb.Value_StructValue)
	if !ok {
		return nil, fmt.Errorf("node metadata %s must be a struct of strings", metaLabels)
	}
	fields := s.StructValue.GetFields()
	labels := make(map[string]string, len(fields))
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sv, ok := fields[k].GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, fmt.Errorf("node metadata %s[%s] must be a string", metaLabels, k)
		}
		labels[k] = sv.StringValue
	}
	return labels, nil
}
