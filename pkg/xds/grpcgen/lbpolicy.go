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
// and reported.
func applyLoadBalancer(c *cluster.Cluster, lb *networking.LoadBalancerSettings, drop dropReporter) {
	c.LbPolicy = cluster.Cluster_ROUND_ROBIN
	switch policy := lb.GetLbPolicy().(type) {
	case nil:
	case *networking.LoadBalancerSettings_Simple:
		switch policy.Simple {
		case networking.LoadBalancerSettings_UNSPECIFIED, networking.LoadBalancerSettings_ROUND_ROBIN:
		case networking.LoadBalancerSettings_LEAST_REQUEST, networking.LoadBalancerSettings_LEAST_CONN:
			c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		default:
			drop.field("loadBalancer.simple", "grpc-go does not implement "+policy.Simple.String()+"; ROUND_ROBIN is used")
		}
	case *networking.LoadBalancerSettings_ConsistentHash:
		applyConsistentHash(c, policy.ConsistentHash, drop)
	case *networking.LoadBalancerSettings_BackendUtilization:
		drop.field("loadBalancer.backendUtilization", "not translated for grpc-go; ROUND_ROBIN is used")
	default:
		drop.field("loadBalancer", fmt.Sprintf("policy %T not translated for grpc-go; ROUND_ROBIN is used", policy))
	}
}

func applyConsistentHash(c *cluster.Cluster, ch *networking.LoadBalancerSettings_ConsistentHashLB, drop dropReporter) {
	//lint:ignore SA1019 Istio still applies the deprecated top-level size unless ringHash sets one
	minRing := ch.GetMinimumRingSize()
	switch algo := ch.GetHashAlgorithm().(type) {
	case nil:
	case *networking.LoadBalancerSettings_ConsistentHashLB_RingHash_:
		if m := algo.RingHash.GetMinimumRingSize(); m != 0 {
			minRing = m
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_Maglev:
		drop.field("loadBalancer.consistentHash.maglev", "grpc-go implements only ring hash; ROUND_ROBIN is used")
		return
	default:
		drop.field("loadBalancer.consistentHash", fmt.Sprintf("hash algorithm %T not translated for grpc-go; ROUND_ROBIN is used", algo))
		return
	}
	ring := &cluster.Cluster_RingHashLbConfig{HashFunction: cluster.Cluster_RingHashLbConfig_XX_HASH}
	if minRing != 0 {
		ring.MinimumRingSize = wrapperspb.UInt64(min(minRing, maxRingSize))
	}
	c.LbPolicy = cluster.Cluster_RING_HASH
	c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: ring}
}
