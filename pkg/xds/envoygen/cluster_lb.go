package envoygen

import (
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	xdstype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// Envoy's validation bounds for hash-based load balancers.
const (
	maxRingHashSize    = 8 * 1024 * 1024
	maxMaglevTableSize = 5000011
	// defaultRingHashSize is what Istio sets when a consistentHash names
	// neither algorithm (Envoy's own default).
	defaultRingHashSize = 1024
)

// applyLoadBalancer translates loadBalancer. Without one, Istio's default
// algorithm, LEAST_REQUEST, applies. hasOutlier says whether the cluster has
// outlier detection, without which locality failover never triggers.
func (b *clusterBuilder) applyLoadBalancer(lb *networking.LoadBalancerSettings, hasOutlier bool) {
	if lp := localityPolicyOf(lb); lp.enabled {
		failover := hasOutlier && (len(lp.setting.GetFailover()) > 0 || len(lp.setting.GetFailoverPriority()) > 0)
		if failover || len(lp.setting.GetDistribute()) > 0 {
			b.commonLbConfig().LocalityConfigSpecifier = &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &cluster.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			}
		}
	}
	if lb.GetZoneAwareLbSetting() != nil {
		b.drop.field("loadBalancer.zoneAwareLbSetting", "not translated for Envoy sidecars; use localityLbSetting")
	}
	switch policy := lb.GetLbPolicy().(type) {
	case *networking.LoadBalancerSettings_Simple:
		switch policy.Simple {
		case networking.LoadBalancerSettings_ROUND_ROBIN:
			b.c.LbPolicy = cluster.Cluster_ROUND_ROBIN
			b.applyWarmup(lb)
		case networking.LoadBalancerSettings_RANDOM:
			b.c.LbPolicy = cluster.Cluster_RANDOM
			b.dropWarmup(lb, "RANDOM")
		case networking.LoadBalancerSettings_PASSTHROUGH:
			// Connect to the address the client dialled, bypassing EDS.
			b.c.ClusterDiscoveryType = &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST}
			b.c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
			b.dropWarmup(lb, "PASSTHROUGH")
		default: // LEAST_REQUEST, LEAST_CONN (its deprecated name), UNSPECIFIED
			b.leastRequest(lb)
		}
	case *networking.LoadBalancerSettings_ConsistentHash:
		b.applyConsistentHash(policy.ConsistentHash)
		b.dropWarmup(lb, "consistentHash")
	case *networking.LoadBalancerSettings_BackendUtilization:
		b.drop.field("loadBalancer.backendUtilization", "not translated for Envoy sidecars; using the default LEAST_REQUEST")
		b.leastRequest(lb)
	default:
		b.leastRequest(lb)
	}
}

func (b *clusterBuilder) leastRequest(lb *networking.LoadBalancerSettings) {
	b.c.LbPolicy = cluster.Cluster_LEAST_REQUEST
	b.applyWarmup(lb)
}

// applyWarmup turns warmup (or the older warmupDurationSecs) into Envoy's
// slow start for ROUND_ROBIN and LEAST_REQUEST, the two that support it.
func (b *clusterBuilder) applyWarmup(lb *networking.LoadBalancerSettings) {
	cfg := slowStart(lb)
	if cfg == nil {
		return
	}
	if b.c.LbPolicy == cluster.Cluster_ROUND_ROBIN {
		b.c.LbConfig = &cluster.Cluster_RoundRobinLbConfig_{RoundRobinLbConfig: &cluster.Cluster_RoundRobinLbConfig{SlowStartConfig: cfg}}
		return
	}
	b.c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{SlowStartConfig: cfg}}
}

func (b *clusterBuilder) dropWarmup(lb *networking.LoadBalancerSettings, policy string) {
	if lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil {
		b.drop.field("loadBalancer.warmup", "slow start applies only to ROUND_ROBIN and LEAST_REQUEST, not "+policy)
	}
}

func slowStart(lb *networking.LoadBalancerSettings) *cluster.Cluster_SlowStartConfig {
	if w := lb.GetWarmup(); w != nil && w.GetDuration() != nil {
		cfg := &cluster.Cluster_SlowStartConfig{SlowStartWindow: w.GetDuration()}
		if a := w.GetAggression(); a != nil {
			cfg.Aggression = &core.RuntimeDouble{DefaultValue: a.GetValue(), RuntimeKey: "upstream.slow_start.aggression"}
		}
		if p := w.GetMinimumPercent(); p != nil {
			cfg.MinWeightPercent = &xdstype.Percent{Value: p.GetValue()}
		}
		return cfg
	}
	if d := lb.GetWarmupDurationSecs(); d != nil {
		return &cluster.Cluster_SlowStartConfig{SlowStartWindow: d}
	}
	return nil
}

// applyConsistentHash selects RING_HASH or MAGLEV; the hash key itself
// belongs on the route (HashPolicy).
func (b *clusterBuilder) applyConsistentHash(ch *networking.LoadBalancerSettings_ConsistentHashLB) {
	switch algo := ch.GetHashAlgorithm().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_Maglev:
		b.c.LbPolicy = cluster.Cluster_MAGLEV
		if size := algo.Maglev.GetTableSize(); size != 0 {
			if size > maxMaglevTableSize {
				b.drop.field("loadBalancer.consistentHash.maglev.tableSize",
					"larger than Envoy's limit "+strconv.Itoa(maxMaglevTableSize)+"; using Envoy's default")
				return
			}
			b.c.LbConfig = &cluster.Cluster_MaglevLbConfig_{MaglevLbConfig: &cluster.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(size)}}
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_RingHash_:
		b.c.LbPolicy = cluster.Cluster_RING_HASH
		if size := algo.RingHash.GetMinimumRingSize(); size != 0 {
			b.setRingSize(size, "loadBalancer.consistentHash.ringHash.minimumRingSize")
		}
	default:
		b.c.LbPolicy = cluster.Cluster_RING_HASH
		//lint:ignore SA1019 without a hash algorithm, Istio still applies the deprecated top-level size
		size := ch.GetMinimumRingSize()
		if size == 0 {
			size = defaultRingHashSize
		}
		b.setRingSize(size, "loadBalancer.consistentHash.minimumRingSize")
	}
}

func (b *clusterBuilder) setRingSize(size uint64, field string) {
	if size > maxRingHashSize {
		b.drop.field(field, "larger than Envoy's limit "+strconv.Itoa(maxRingHashSize)+"; using the limit")
		size = maxRingHashSize
	}
	b.c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: &cluster.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(size)}}
}

// HashPolicy returns the route hash policy that a consistentHash load
// balancer needs (Envoy hashes on the route, then picks the host in the
// cluster's ring), or nil when lb is not consistent hashing. Route
// generators put it on every route action that targets a cluster of lb.
func HashPolicy(lb *networking.LoadBalancerSettings) []*route.RouteAction_HashPolicy {
	ch := lb.GetConsistentHash()
	if ch == nil {
		return nil
	}
	var policy route.RouteAction_HashPolicy
	switch key := ch.GetHashKey().(type) {
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		policy.PolicySpecifier = &route.RouteAction_HashPolicy_Header_{
			Header: &route.RouteAction_HashPolicy_Header{HeaderName: key.HttpHeaderName},
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		cookie := &route.RouteAction_HashPolicy_Cookie{
			Name: key.HttpCookie.GetName(),
			Path: key.HttpCookie.GetPath(),
		}
		if ttl := key.HttpCookie.GetTtl(); ttl != nil {
			cookie.Ttl = durationpb.New(ttl.AsDuration())
		}
		for _, a := range key.HttpCookie.GetAttributes() {
			cookie.Attributes = append(cookie.Attributes, &route.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		policy.PolicySpecifier = &route.RouteAction_HashPolicy_Cookie_{Cookie: cookie}
	case *networking.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		policy.PolicySpecifier = &route.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: key.UseSourceIp},
		}
	case *networking.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		policy.PolicySpecifier = &route.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: key.HttpQueryParameterName},
		}
	default:
		return nil
	}
	return []*route.RouteAction_HashPolicy{&policy}
}

// localityPolicy is the locality load balancing that applies to a cluster.
type localityPolicy struct {
	enabled bool
	// setting is the rule's; nil for the mesh default (Istio's default mesh
	// config enables locality load balancing with no explicit settings).
	setting *networking.LocalityLoadBalancerSetting
}

func localityPolicyOf(lb *networking.LoadBalancerSettings) localityPolicy {
	s := lb.GetLocalityLbSetting()
	if s != nil && s.GetEnabled() != nil && !s.GetEnabled().GetValue() {
		return localityPolicy{}
	}
	return localityPolicy{enabled: true, setting: s}
}
