package envoygen

import (
	"log/slog"
	"math"
	"strings"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// defaultConnectTimeout is Istio's mesh default connectTimeout.
const defaultConnectTimeout = 10 * time.Second

// httpProtocolOptionsKey is the typed_extension_protocol_options key Envoy
// reads upstream HTTP settings from.
const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// outboundCluster names what one outbound cluster is built from. Everything
// a cluster depends on is here, so it doubles as the cluster cache key.
type outboundCluster struct {
	svc    *model.Service
	port   *model.Port
	subset string
	// rule is the DestinationRule the proxy resolves for the host; nil if none.
	rule      *pushcontext.DestinationRule
	proxyType model.NodeType
	// peer is what mutual TLS to the service depends on besides the rule.
	peer peerTLS
}

// peerTLS is what the client side of mutual TLS knows about a service's
// servers.
type peerTLS struct {
	// identities are the workload identities the server must prove one of.
	identities pushcontext.WorkloadIdentities
	// auto is set when auto mTLS applies to the service: the mesh enables
	// it and the service's namespace does not disable mutual TLS.
	auto bool
	// allMTLS is set for an original-destination cluster (loadBalancer
	// PASSTHROUGH) under auto mTLS when every endpoint of the service port
	// takes mutual TLS (PushContext.AllEndpointsMTLS). Such a cluster has
	// no endpoints for a transport socket match to look at, so it sends
	// mutual TLS to the whole of it or to none of it. It is left false
	// for every other cluster, whose cache entries it must not split.
	allMTLS bool
}

// peerTLSFor is peerTLS of svc in push. Auto mTLS never applies to a DNS
// service: what its name resolves to is outside the mesh, as in Istio.
func peerTLSFor(push *pushcontext.PushContext, svc *model.Service) peerTLS {
	return peerTLS{
		identities: push.ServiceIdentities(svc.Hostname),
		auto:       !svc.IsExternalName() && push.AutoMTLS() && push.NamespaceMTLSMode(svc.Namespace) != model.MTLSDisable,
	}
}

// clusterBuilder assembles one cluster: the cluster message, the upstream
// HTTP options that end up packed into it, and where to report the parts of
// a DestinationRule that could not be translated.
type clusterBuilder struct {
	c    *cluster.Cluster
	http *httpv3.HttpProtocolOptions
	drop problemReporter
}

// problemReporter records, once per push, a DestinationRule field that a
// generator had to leave out, and logs it the first time.
type problemReporter struct {
	push    *pushcontext.PushContext
	logger  *slog.Logger
	rule    *pushcontext.DestinationRule
	cluster string
	// record, when set, collects the dropped fields for the cluster cache.
	record *[]droppedField
}

// field reports that field (a path in the rule) was dropped and why. The
// reason must not name the proxy, so that it is logged once per push.
func (r problemReporter) field(field, reason string) {
	if r.push == nil || r.rule == nil || len(r.rule.From) == 0 {
		return
	}
	if r.record != nil {
		*r.record = append(*r.record, droppedField{field: field, reason: reason})
	}
	from := r.rule.From[0]
	key := model.ConfigKey{Kind: model.KindDestinationRule, Namespace: from.Namespace, Name: from.Name}
	if r.push.ReportProblem(key, field+": "+reason) {
		r.logger.Warn("DestinationRule field not translated; the rest of the rule still applies",
			"destinationRule", from.String(), "field", field, "reason", reason,
			"cluster", r.cluster, "mergedFrom", len(r.rule.From))
	}
}

// buildOutboundCluster translates one service port (and subset) with the
// rule's traffic policy for it, in Istio's order: protocol, connection pool,
// HTTP/2 upgrade, outlier detection, load balancer (which reads the outlier
// settings), TLS, then the wrappers around the transport socket.
func buildOutboundCluster(o outboundCluster, drop problemReporter) *cluster.Cluster {
	name := OutboundClusterName(o.svc.Hostname, o.port.Port, o.subset)
	drop.cluster = name
	discovery := cluster.Cluster_EDS
	if o.svc.IsExternalName() {
		discovery = cluster.Cluster_STRICT_DNS
	}
	b := &clusterBuilder{
		c: &cluster.Cluster{
			Name:                 name,
			ClusterDiscoveryType: &cluster.Cluster_Type{Type: discovery},
			ConnectTimeout:       durationpb.New(defaultConnectTimeout),
		},
		drop: drop,
	}
	policy := o.rule.TrafficPolicy(o.port.Port, o.subset)
	b.setUpstreamProtocol(o.port.Protocol, o.proxyType == model.SidecarProxy)
	b.applyConnectionPool(policy.GetConnectionPool())
	b.applyH2Upgrade(policy.GetConnectionPool())
	b.applyOutlierDetection(policy.GetOutlierDetection())
	b.applyLoadBalancer(policy.GetLoadBalancer(), policy.GetOutlierDetection() != nil)
	b.applyRetryBudget(policy.GetRetryBudget())
	if b.c.GetType() == cluster.Cluster_ORIGINAL_DST {
		b.c.LbPolicy = cluster.Cluster_CLUSTER_PROVIDED
	}
	b.applyTLS(policy.GetTls(), tlsTarget{
		istioSNI:     istioMutualSNI(o.svc.Hostname, o.port.Port, o.subset),
		sidecar:      o.proxyType == model.SidecarProxy,
		ruleSelector: o.rule != nil && o.rule.Spec.GetWorkloadSelector() != nil,
		peer:         o.peer,
		externalSNI:  externalSNI(o.svc),
	})
	b.applyProxyProtocol(policy.GetProxyProtocol())
	// The rule may have made it another type (PASSTHROUGH: the original
	// destination).
	switch b.c.GetType() {
	case cluster.Cluster_STRICT_DNS:
		b.resolveExternalName(o)
	case cluster.Cluster_EDS:
		// No service_name: Envoy then asks EDS for the cluster's own name
		// (Cluster.EdsClusterConfig.service_name, cluster.proto), which is
		// the name a service_name would repeat, 45 bytes in each of a
		// sidecar's thousands of clusters.
		b.c.EdsClusterConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: adsConfigSource()}
	}
	return b.build()
}

// istioMutualSNI is the SNI Istio sends for ISTIO_MUTUAL when the rule sets
// none: outbound_.<port>_.<subset>_.<host>.
func istioMutualSNI(host string, port uint32, subset string) string {
	var sb strings.Builder
	sb.Grow(len("outbound_.") + 5 + 2 + len(subset) + 2 + len(host))
	sb.WriteString("outbound_.")
	sb.WriteString(OutboundRouteName(port))
	sb.WriteString("_.")
	sb.WriteString(subset)
	sb.WriteString("_.")
	sb.WriteString(host)
	return sb.String()
}

// adsConfigSource points a cluster's EDS (or a secret) at the ADS stream,
// with initial_fetch_timeout 0: a warming cluster waits for its load
// assignment as long as it takes. The server always follows a CDS update
// with the changed clusters' assignments (pkg/xds warming.go), so the wait
// ends; a timeout would instead let a cluster go live with no endpoints
// (every request a 503) whenever the control plane is slow, and after an
// update would swap a working cluster for an empty one.
func adsConfigSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		InitialFetchTimeout:   durationpb.New(0),
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}

// httpOptions returns the cluster's upstream HTTP options, creating them.
func (b *clusterBuilder) httpOptions() *httpv3.HttpProtocolOptions {
	if b.http == nil {
		b.http = &httpv3.HttpProtocolOptions{}
	}
	return b.http
}

func (b *clusterBuilder) commonHTTPOptions() *core.HttpProtocolOptions {
	o := b.httpOptions()
	if o.CommonHttpProtocolOptions == nil {
		o.CommonHttpProtocolOptions = &core.HttpProtocolOptions{}
	}
	return o.CommonHttpProtocolOptions
}

func (b *clusterBuilder) commonLbConfig() *cluster.Cluster_CommonLbConfig {
	if b.c.CommonLbConfig == nil {
		b.c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{}
	}
	return b.c.CommonLbConfig
}

// setUpstreamProtocol speaks HTTP/2 to HTTP2 and gRPC ports; a sidecar
// forwards traffic of ports whose protocol it sniffs with the protocol the
// client used (a router does not sniff).
func (b *clusterBuilder) setUpstreamProtocol(p model.Protocol, sidecar bool) {
	switch {
	case p == model.ProtocolHTTP2 || p == model.ProtocolGRPC:
		b.setHTTP2()
	case sidecar && p == model.ProtocolUnknown:
		b.useDownstreamProtocol()
	}
}

func (b *clusterBuilder) setHTTP2() {
	b.httpOptions().UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
				Http2ProtocolOptions: &core.Http2ProtocolOptions{},
			},
		},
	}
}

func (b *clusterBuilder) useDownstreamProtocol() {
	b.httpOptions().UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
		UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
			HttpProtocolOptions:  &core.Http1ProtocolOptions{},
			Http2ProtocolOptions: &core.Http2ProtocolOptions{},
		},
	}
}

// http2Options returns the HTTP/2 options of an explicit HTTP/2 cluster, nil
// for any other.
func (b *clusterBuilder) http2Options() *core.Http2ProtocolOptions {
	if b.http == nil {
		return nil
	}
	return b.http.GetExplicitHttpConfig().GetHttp2ProtocolOptions()
}

// build packs the upstream HTTP options into the cluster. Envoy requires a
// protocol selection once the options exist, so HTTP/1.1 is made explicit.
func (b *clusterBuilder) build() *cluster.Cluster {
	if b.http != nil {
		if b.http.UpstreamProtocolOptions == nil {
			b.http.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
				ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{
						HttpProtocolOptions: &core.Http1ProtocolOptions{},
					},
				},
			}
		}
		b.c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpProtocolOptionsKey: packAny(b.http)}
	}
	return b.c
}

// packAny wraps m in an Any with deterministic bytes, so equal clusters
// marshal to equal bytes.
func packAny(m proto.Message) *anypb.Any {
	return &anypb.Any{TypeUrl: typeURL(m), Value: marshalDeterministic(m)}
}

// typeURL is the Any type URL of m's message.
func typeURL(m proto.Message) string {
	return "type.googleapis.com/" + string(m.ProtoReflect().Descriptor().FullName())
}

func marshalDeterministic(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Only an invalid UTF-8 string can fail here; the inputs are
		// validated Kubernetes and Istio objects.
		panic("envoygen: marshal " + string(m.ProtoReflect().Descriptor().FullName()) + ": " + err.Error())
	}
	return b
}

// defaultThresholds are Istio's circuit breaker defaults: effectively no
// limits (Envoy's own defaults, such as 3 concurrent retries, cause 503s
// during rollouts), with remaining capacity tracked for stats.
func defaultThresholds() *cluster.CircuitBreakers_Thresholds {
	return &cluster.CircuitBreakers_Thresholds{
		MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
		MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
		MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
		MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
		TrackRemaining:     true,
	}
}

// thresholds returns the cluster's single circuit breaker threshold set.
func (b *clusterBuilder) thresholds() *cluster.CircuitBreakers_Thresholds {
	if b.c.CircuitBreakers == nil || len(b.c.CircuitBreakers.Thresholds) == 0 {
		b.c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{defaultThresholds()}}
	}
	return b.c.CircuitBreakers.Thresholds[0]
}
