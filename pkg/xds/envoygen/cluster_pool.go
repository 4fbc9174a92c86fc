package envoygen

import (
	"strconv"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/matcher/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	proxyprotocolv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	xdstype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
)

// applyConnectionPool turns connectionPool into circuit breakers and
// upstream HTTP options. Every cluster gets Istio's default thresholds even
// without settings; a zero value in the rule means "not set", as in Istio.
func (b *clusterBuilder) applyConnectionPool(cp *networking.ConnectionPoolSettings) {
	t := b.thresholds()
	var idleTimeout, maxConnectionDuration *durationpb.Duration
	var maxRequestsPerConnection, maxConcurrentStreams uint32
	if h := cp.GetHttp(); h != nil {
		// Envoy applies max_requests to HTTP/2 and max_pending_requests to
		// HTTP/1.1 upstreams, which is what the two Istio fields mean.
		if h.GetHttp2MaxRequests() > 0 {
			t.MaxRequests = wrapperspb.UInt32(uint32(h.GetHttp2MaxRequests()))
		}
		if h.GetHttp1MaxPendingRequests() > 0 {
			t.MaxPendingRequests = wrapperspb.UInt32(uint32(h.GetHttp1MaxPendingRequests()))
		}
		if h.GetMaxRetries() > 0 {
			t.MaxRetries = wrapperspb.UInt32(uint32(h.GetMaxRetries()))
		}
		idleTimeout = h.GetIdleTimeout()
		maxRequestsPerConnection = uint32(max(h.GetMaxRequestsPerConnection(), 0))
		maxConcurrentStreams = uint32(max(h.GetMaxConcurrentStreams(), 0))
	}
	if tcp := cp.GetTcp(); tcp != nil {
		if tcp.GetConnectTimeout() != nil {
			b.c.ConnectTimeout = tcp.GetConnectTimeout()
		}
		if tcp.GetMaxConnections() > 0 {
			t.MaxConnections = wrapperspb.UInt32(uint32(tcp.GetMaxConnections()))
		}
		maxConnectionDuration = tcp.GetMaxConnectionDuration()
		if idleTimeout == nil {
			idleTimeout = tcp.GetIdleTimeout()
		}
		b.applyTCPKeepalive(tcp.GetTcpKeepalive())
	}
	if idleTimeout != nil || maxConnectionDuration != nil || maxRequestsPerConnection > 0 {
		common := b.commonHTTPOptions()
		common.IdleTimeout = idleTimeout
		common.MaxConnectionDuration = maxConnectionDuration
		if maxRequestsPerConnection > 0 {
			common.MaxRequestsPerConnection = wrapperspb.UInt32(maxRequestsPerConnection)
		}
	}
	if cp.GetHttp().GetUseClientProtocol() {
		b.useDownstreamProtocol()
	}
	b.applyHTTP2Settings(maxConcurrentStreams, cp.GetHttp().GetHttp2KeepAlive())
}

// defaultH2KeepaliveTimeout bounds the wait for a keepalive ping's answer
// when the rule sets only the interval.
const defaultH2KeepaliveTimeout = 20 * time.Second

// applyHTTP2Settings sets the HTTP/2-only limits; they only mean something
// on a cluster that speaks HTTP/2, and are ignored otherwise, as in Istio.
func (b *clusterBuilder) applyHTTP2Settings(maxConcurrentStreams uint32, ka *networking.ConnectionPoolSettings_HTTPSettings_ConnectionKeepalive) {
	h2 := b.http2Options()
	if h2 == nil {
		return
	}
	if maxConcurrentStreams > 0 {
		h2.MaxConcurrentStreams = wrapperspb.UInt32(maxConcurrentStreams)
	}
	if ka != nil && (ka.GetInterval() != nil || ka.GetTimeout() != nil) {
		h2.ConnectionKeepalive = &core.KeepaliveSettings{Interval: ka.GetInterval(), Timeout: ka.GetTimeout()}
		if ka.GetTimeout() == nil {
			// Envoy requires a timeout with keepalive pings.
			h2.ConnectionKeepalive.Timeout = durationpb.New(defaultH2KeepaliveTimeout)
		}
	}
}

func (b *clusterBuilder) applyTCPKeepalive(ka *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) {
	if ka == nil {
		return
	}
	keepalive := &core.TcpKeepalive{}
	if ka.GetProbes() > 0 {
		keepalive.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
	}
	if d := ka.GetTime(); d != nil {
		keepalive.KeepaliveTime = wrapperspb.UInt32(durationSeconds(d))
	}
	if d := ka.GetInterval(); d != nil {
		keepalive.KeepaliveInterval = wrapperspb.UInt32(durationSeconds(d))
	}
	b.c.UpstreamConnectionOptions = &cluster.UpstreamConnectionOptions{TcpKeepalive: keepalive}
}

// durationSeconds rounds d up to whole seconds (Envoy's keepalive unit),
// at least 1 so that a sub-second setting does not disable keepalives.
func durationSeconds(d *durationpb.Duration) uint32 {
	s := d.GetSeconds()
	if d.GetNanos() > 0 {
		s++
	}
	return uint32(min(max(s, 1), int64(^uint32(0))))
}

// applyH2Upgrade honours h2UpgradePolicy. UPGRADE makes the cluster HTTP/2
// whatever the port's protocol (the user asserts it speaks HTTP); without a
// setting the mesh default, DO_NOT_UPGRADE, applies.
func (b *clusterBuilder) applyH2Upgrade(cp *networking.ConnectionPoolSettings) {
	if cp.GetHttp().GetH2UpgradePolicy() != networking.ConnectionPoolSettings_HTTPSettings_UPGRADE || b.http2Options() != nil {
		return
	}
	b.setHTTP2()
	h := cp.GetHttp()
	b.applyHTTP2Settings(uint32(max(h.GetMaxConcurrentStreams(), 0)), h.GetHttp2KeepAlive())
}

// applyOutlierDetection translates outlierDetection. Success-rate ejection
// stays off, and the panic threshold becomes minHealthPercent (0 unless set)
// because few-pod Kubernetes services would otherwise hit panic mode at once.
func (b *clusterBuilder) applyOutlierDetection(od *networking.OutlierDetection) {
	if od == nil {
		return
	}
	out := &cluster.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutive_5Xx = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	if e := od.GetConsecutiveGatewayErrors(); e != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutiveGatewayFailure = wrapperspb.UInt32(enforcing(e.GetValue()))
	}
	out.Interval = od.GetInterval()
	out.BaseEjectionTime = od.GetBaseEjectionTime()
	if od.GetMaxEjectionPercent() > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(od.GetMaxEjectionPercent()))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if n := od.GetConsecutiveLocalOriginFailures().GetValue(); n > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(n)
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	if f := od.GetFailurePercentageThreshold(); f != nil {
		out.FailurePercentageThreshold = wrapperspb.UInt32(f.GetValue())
		out.EnforcingFailurePercentage = wrapperspb.UInt32(100)
	}
	//lint:ignore SA1019 read only to report that the deprecated field is ignored
	if od.GetConsecutiveErrors() != 0 {
		b.drop.field("outlierDetection.consecutiveErrors", "deprecated and ignored by Istio; use consecutive5xxErrors or consecutiveGatewayErrors")
	}
	if codes := od.GetOutlierDetectionHttpErrorCodes(); len(codes) > 0 {
		b.httpOptions().OutlierDetection = &httpv3.HttpProtocolOptions_OutlierDetection{ErrorMatcher: statusCodesMatcher(codes)}
	}
	b.c.OutlierDetection = out
	b.commonLbConfig().HealthyPanicThreshold = &xdstype.Percent{Value: float64(max(od.GetMinHealthPercent(), 0))}
}

// statusCodesMatcher matches a response whose status is one of codes: what
// outlierDetectionHttpErrorCodes makes Envoy count as an error toward the
// consecutive-error thresholds instead of any 5xx (the upstream HTTP
// options' outlier_detection.error_matcher, matched against the :status
// pseudo-header). One code is its own predicate, as Istio writes it.
func statusCodesMatcher(codes []uint32) *matcherv3.MatchPredicate {
	rules := make([]*matcherv3.MatchPredicate, len(codes))
	for i, code := range codes {
		rules[i] = &matcherv3.MatchPredicate{Rule: &matcherv3.MatchPredicate_HttpResponseHeadersMatch{
			HttpResponseHeadersMatch: &matcherv3.HttpHeadersMatch{Headers: []*route.HeaderMatcher{{
				Name: ":status",
				HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{
					MatchPattern: &matcher.StringMatcher_Exact{Exact: strconv.FormatUint(uint64(code), 10)},
				}},
			}}},
		}}
	}
	if len(rules) == 1 {
		return rules[0]
	}
	return &matcherv3.MatchPredicate{Rule: &matcherv3.MatchPredicate_OrMatch{OrMatch: &matcherv3.MatchPredicate_MatchSet{Rules: rules}}}
}

// enforcing is Istio's rule: a positive threshold is always enforced, a zero
// one disables that kind of ejection.
func enforcing(threshold uint32) uint32 {
	if threshold > 0 {
		return 100
	}
	return 0
}

// applyRetryBudget limits concurrent retries to a share of active requests.
func (b *clusterBuilder) applyRetryBudget(rb *networking.TrafficPolicy_RetryBudget) {
	if rb == nil {
		return
	}
	budget := &cluster.CircuitBreakers_Thresholds_RetryBudget{}
	if p := rb.GetPercent(); p != nil {
		budget.BudgetPercent = &xdstype.Percent{Value: p.GetValue()}
	}
	if n := rb.GetMinRetryConcurrency(); n > 0 {
		budget.MinRetryConcurrency = wrapperspb.UInt32(n)
	}
	if rb.GetBudgetInterval() != nil {
		b.drop.field("trafficPolicy.retryBudget.budgetInterval", "Envoy's retry budget has no interval; the budget applies to active requests")
	}
	// Envoy lets a retry budget override max_retries.
	b.thresholds().RetryBudget = budget
}

// applyProxyProtocol sends a PROXY protocol header on upstream connections,
// wrapping whatever transport socket the cluster already has.
func (b *clusterBuilder) applyProxyProtocol(pp *networking.TrafficPolicy_ProxyProtocol) {
	if pp == nil {
		return
	}
	version := core.ProxyProtocolConfig_V1
	if pp.GetVersion() == networking.TrafficPolicy_ProxyProtocol_V2 {
		version = core.ProxyProtocolConfig_V2
	}
	wrap := func(inner *core.TransportSocket) *core.TransportSocket {
		if inner == nil {
			inner = rawBufferSocket()
		}
		return &core.TransportSocket{
			Name: "envoy.transport_sockets.upstream_proxy_protocol",
			ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: packAny(&proxyprotocolv3.ProxyProtocolUpstreamTransport{
				Config:          &core.ProxyProtocolConfig{Version: version},
				TransportSocket: inner,
			})},
		}
	}
	// Under auto mTLS every endpoint's socket gets the header: the mutual
	// TLS match's, and the cluster's own, which the endpoints that match
	// nothing use. Parts of the entries are shared (cluster_tls.go), so the
	// entries are replaced, never modified.
	for i, m := range b.c.TransportSocketMatches {
		b.c.TransportSocketMatches[i] = &cluster.Cluster_TransportSocketMatch{
			Name: m.GetName(), Match: m.GetMatch(), TransportSocket: wrap(m.GetTransportSocket()),
		}
	}
	b.c.TransportSocket = wrap(b.c.TransportSocket)
}

// The plaintext socket the proxy protocol wraps when there is no other:
// the endpoints of an auto mTLS cluster that match no transport socket
// match, or a cluster without TLS.
const transportSocketRaw = "envoy.transport_sockets.raw_buffer"

var rawBufferConfig = packAny(&rawbufferv3.RawBuffer{})

func rawBufferSocket() *core.TransportSocket {
	return &core.TransportSocket{
		Name:       transportSocketRaw,
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: rawBufferConfig},
	}
}
