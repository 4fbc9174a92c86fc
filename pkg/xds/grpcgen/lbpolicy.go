package grpcgen

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// maxRingSize is the largest ring Envoy's validation and grpc-go accept.
const maxRingSize = 8 * 1024 * 1024

// applyLoadBalancer sets the cluster's load balancing policy from a
// DestinationRule's settings. grpc-go NACKs the whole CDS response for a
// policy it does not implement, so such a policy is replaced by ROUND_ROBIN
// and described in the returned string (empty when lb was honoured).
func applyLoadBalancer(c *cluster.Cluster, lb *networking.LoadBalancerSettings) (unsupported string) {
	c.LbPolicy = cluster.Cluster_ROUND_ROBIN
	switch policy := lb.GetLbPolicy().(type) {
	case nil:
		return ""
	case *networking.LoadBalancerSettings_Simple:
		switch policy.Simple {
		case networking.LoadBalancerSettings_UNSPECIFIED, networking.LoadBalancerSettings_ROUND_ROBIN:
			return ""
		case networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN:
			c.LbPolicy = cluster.Cluster_LEAST_REQUEST
			return ""
		default:
			return "simple: " + policy.Simple.String()
		}
	case *networking.LoadBalancerSettings_ConsistentHash:
		return applyConsistentHash(c, policy.ConsistentHash)
	case *networking.LoadBalancerSettings_BackendUtilization:
		return "backendUtilization"
	default:
		return fmt.Sprintf("%T", policy)
	}
}

func applyConsistentHash(c *cluster.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB) string {
	minRing := ch.GetMinimumRingSize() // deprecated top-level field
	switch algo := ch.GetHashAlgorithm().(type) {
	case nil:
	case *networking.LoadBalancerSettings_ConsistentHashLB_RingHash_:
		if m := algo.RingHash.GetMinimumRingSize(); m != 0 {
			minRing = m
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_Maglev:
		return "consistentHash: maglev"
	default:
		return fmt.Sprintf("consistentHash: %T", algo)
	}
	ring := &cluster.Cluster_RingHashLbConfig{HashFunction: cluster.Cluster_RingHashLbConfig_XX_HASH}
	if minRing != 0 {
		ring.MinimumRingSize = wrapperspb.UInt64(min(minRing, maxRingSize))
	}
	c.LbPolicy = cluster.Cluster_RING_HASH
	c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: ring}
	return ""
}
