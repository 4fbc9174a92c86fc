package grpcgen

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// Why the fields grpc-go has no use for are dropped, as reported.
const (
	notForGRPC        = "not translated for grpc-go, which has no equivalent"
	noLocalityReason  = "not translated for grpc-go: its load assignments are shared by every client and carry no priorities or weights relative to a client's locality"
	noOutlierReason   = "not translated for grpc-go: it ejects endpoints only by success rate or failure percentage (gRFC A50), which a DestinationRule cannot express, and has no consecutive-error ejection"
	onlyMaxReqsReason = "grpc-go honours only http.http2MaxRequests (as circuit breaking max_requests, gRFC A32); the rest is not translated"
)

// applyTrafficPolicy gives the cluster what grpc-go honours of a resolved
// traffic policy (load balancer, circuit breaking) and reports every other
// field that is set, so that nothing is dropped silently. TLS is
// applyClientTLS's.
func applyTrafficPolicy(c *cluster.Cluster, policy *networking.TrafficPolicy, drop dropReporter) {
	lb := policy.GetLoadBalancer()
	applyLoadBalancer(c, lb, drop)
	if s := lb.GetLocalityLbSetting(); s != nil && (s.GetEnabled() == nil || s.GetEnabled().GetValue()) {
		drop.field("loadBalancer.localityLbSetting", noLocalityReason)
	}
	if lb.GetZoneAwareLbSetting() != nil {
		drop.field("loadBalancer.zoneAwareLbSetting", notForGRPC)
	}
	if lb.GetWarmup() != nil || lb.GetWarmupDurationSecs() != nil {
		drop.field("loadBalancer.warmup", "not translated for grpc-go, which has no slow start")
	}
	applyConnectionPool(c, policy.GetConnectionPool(), drop)
	if policy.GetOutlierDetection() != nil {
		drop.field("outlierDetection", noOutlierReason)
	}
	if policy.GetTunnel() != nil {
		drop.field("tunnel", notForGRPC)
	}
	if policy.GetProxyProtocol() != nil {
		drop.field("proxyProtocol", notForGRPC)
	}
	if policy.GetRetryBudget() != nil {
		drop.field("retryBudget", notForGRPC)
	}
}

// applyConnectionPool translates the one pool limit grpc-go enforces: the
// number of concurrent requests to the cluster.
func applyConnectionPool(c *cluster.Cluster, pool *networking.ConnectionPoolSettings, drop dropReporter) {
	if pool == nil {
		return
	}
	if n := pool.GetHttp().GetHttp2MaxRequests(); n > 0 {
		c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{
			{MaxRequests: wrapperspb.UInt32(uint32(n))},
		}}
	}
	if proto.Size(pool.GetTcp()) > 0 {
		drop.field("connectionPool.tcp", onlyMaxReqsReason)
	}
	if http := pool.GetHttp(); http != nil {
		rest := proto.Clone(http).(*networking.ConnectionPoolSettings_HTTPSettings)
		rest.Http2MaxRequests = 0
		if proto.Size(rest) > 0 {
			drop.field("connectionPool.http", onlyMaxReqsReason)
		}
	}
}
