package xds

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The Cluster fields edsAssignment reads, by number from the descriptor.
var (
	clusterFields       = (&clusterv3.Cluster{}).ProtoReflect().Descriptor().Fields()
	clusterTypeField    = clusterFields.ByName("type").Number()
	clusterEDSField     = clusterFields.ByName("eds_cluster_config").Number()
	edsServiceNameField = (&clusterv3.Cluster_EdsClusterConfig{}).ProtoReflect().Descriptor().Fields().ByName("service_name").Number()
)

// edsAssignment is the ClusterLoadAssignment that the marshalled cluster
// named name waits for while it warms: eds_cluster_config.service_name,
// else its own name. false for a cluster of another type, a DNS cluster
// for instance, which resolves its endpoints itself: Envoy neither
// subscribes to EDS for it nor waits. It reads the few top-level fields it
// needs instead of unmarshalling the cluster (a push may change
// thousands), keeping the last occurrence of each, as protobuf does.
func edsAssignment(name string, value []byte) (string, bool) {
	discovery := uint64(clusterv3.Cluster_STATIC) // the type's zero, when unset
	service := ""
	for len(value) > 0 {
		num, typ, n := protowire.ConsumeTag(value)
		if n < 0 {
			return "", false
		}
		value = value[n:]
		switch {
		case num == clusterTypeField && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(value)
			if m < 0 {
				return "", false
			}
			discovery, n = v, m
		case num == clusterEDSField && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(value)
			if m < 0 {
				return "", false
			}
			// Occurrences of a message merge: a later one without
			// service_name keeps the earlier one's.
			if s, ok := edsServiceName(v); ok {
				service = s
			}
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, value)
		}
		if n < 0 {
			return "", false
		}
		value = value[n:]
	}
	if discovery != uint64(clusterv3.Cluster_EDS) {
		return "", false
	}
	if service == "" {
		return name, true
	}
	return service, true
}

// edsServiceName reads service_name from a marshalled EdsClusterConfig.
func edsServiceName(value []byte) (string, bool) {
	service, found := "", false
	for len(value) > 0 {
		num, typ, n := protowire.ConsumeTag(value)
		if n < 0 {
			return "", false
		}
		value = value[n:]
		if num == edsServiceNameField && typ == protowire.BytesType {
			v, m := protowire.ConsumeString(value)
			if m < 0 {
				return "", false
			}
			service, found, n = v, true, m
		} else if n = protowire.ConsumeFieldValue(num, typ, value); n < 0 {
			return "", false
		}
		value = value[n:]
	}
	return service, found
}
