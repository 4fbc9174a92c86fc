package envoygen

import (
	"net/netip"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// SDS resource names and sources, as Istio's agent and istiod use them.
const (
	// agentSDSCluster is the bootstrap cluster of the local Istio agent,
	// which serves the workload's own certificates and mounted files.
	agentSDSCluster = "sds-grpc"
	// workloadCertSecret and workloadRootSecret are the workload's own
	// certificate and the mesh root, from the agent.
	workloadCertSecret = "default"
	workloadRootSecret = "ROOTCA"
	// credentialPrefix names a Kubernetes Secret served over ADS.
	credentialPrefix = pushcontext.CredentialPrefix
	// caCertSuffix names the CA part of a credential.
	caCertSuffix = pushcontext.CACertSuffix
	// fileCertPrefix and fileRootPrefix name certificates mounted in the
	// proxy's pod, which the agent reads and serves (Envoy cannot rotate
	// files itself).
	fileCertPrefix = "file-cert:"
	fileRootPrefix = "file-root:"
	// systemRoots is the agent's name for the OS trust store, which SIMPLE
	// and MUTUAL use when the rule names no CA, as Istio does.
	systemRoots        = "system"
	transportSocketTLS = "envoy.transport_sockets.tls"
)

// tlsTarget is what TLS settings depend on besides the settings themselves.
type tlsTarget struct {
	// istioSNI is sent for ISTIO_MUTUAL when the rule sets no SNI.
	istioSNI string
	sidecar  bool
	// ruleSelector is set when the rule has a workloadSelector.
	ruleSelector bool
	peer         peerTLS
	// externalSNI is sent, and checked, for SIMPLE and MUTUAL when the
	// rule sets no SNI, for a DNS service (see externalSNI).
	externalSNI string
}

// applyTLS originates TLS as the rule says. Certificates are always SDS
// references: the workload's own for ISTIO_MUTUAL, a Kubernetes Secret for
// credentialName, or pod-mounted files through the agent.
func (b *clusterBuilder) applyTLS(tls *networking.ClientTLSSettings, t tlsTarget) {
	if tls == nil {
		if !t.peer.auto {
			return
		}
		switch b.c.GetType() {
		case cluster.Cluster_EDS:
			b.applyAutoMTLS(b.istioMutualTLS(t.peer.identities.List(), t.istioSNI))
		case cluster.Cluster_ORIGINAL_DST:
			// Envoy makes a host of each original destination without
			// metadata, so a tlsMode match would never apply: mutual TLS
			// must be the cluster's own socket, or nothing. Istio infers
			// it as meshpilot does (BestEffortInferServiceMTLSMode): sent
			// when every endpoint of the port takes it (peer.allMTLS) and
			// the namespace does not disable it (peer.auto). Plaintext
			// otherwise, which a STRICT server refuses, but mutual TLS to
			// a workload without a sidecar would fail every connection.
			if t.peer.allMTLS {
				b.setTransportSocket(b.istioMutualTLS(t.peer.identities.List(), t.istioSNI))
			}
		}
		return
	}
	var ctx *tlsv3.UpstreamTlsContext
	switch tls.GetMode() {
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		// Istio's rule: the rule's subjectAltNames, when it names any,
		// replace the identities behind the service.
		sans := tls.GetSubjectAltNames()
		if len(sans) == 0 {
			sans = t.peer.identities.List()
		}
		sni := tls.GetSni()
		if sni == "" {
			sni = t.istioSNI
		}
		ctx = b.istioMutualTLS(sans, sni)
	case networking.ClientTLSSettings_SIMPLE, networking.ClientTLSSettings_MUTUAL:
		if tls.GetCredentialName() != "" && t.sidecar && !t.ruleSelector {
			// Istio's rule: a credential would otherwise reach every sidecar
			// in scope, and each would wait for a secret it may not read.
			b.drop.field("tls.credentialName", "sidecars take credentialName only from DestinationRules with a workloadSelector; TLS origination left out")
			return
		}
		ctx = b.originateTLS(tls, t.externalSNI)
	default: // DISABLE
		return
	}
	b.setTransportSocket(ctx)
}

// setTransportSocket makes ctx the TLS of every connection of the cluster.
func (b *clusterBuilder) setTransportSocket(ctx *tlsv3.UpstreamTlsContext) {
	b.c.TransportSocket = &core.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: packAny(ctx)},
	}
}

func defaultUpstreamCommonTLS() *tlsv3.CommonTlsContext {
	return &tlsv3.CommonTlsContext{
		TlsParams: &tlsv3.TlsParameters{
			TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
			TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
		},
	}
}

// istioMutualTLS presents the workload's certificate and validates the peer
// against the mesh root and, when sans names any, against those
// identities. The "istio" ALPN marks in-mesh traffic for the server's
// filter chain match; "h2" follows it when the cluster speaks HTTP/2.
func (b *clusterBuilder) istioMutualTLS(sans []string, sni string) *tlsv3.UpstreamTlsContext {
	return istioMutualContext(sans, sni, b.http2Options() != nil)
}

// The parts of every ISTIO_MUTUAL context that never vary, built once:
// every cluster of a full push has one, and messages are only read once
// built, so sharing them is safe.
var (
	istioALPN         = []string{"istio"}
	istioH2ALPN       = []string{"istio", "h2"}
	workloadCertSDS   = []*tlsv3.SdsSecretConfig{agentSecret(workloadCertSecret)}
	workloadRootSDS   = agentSecret(workloadRootSecret)
	upstreamTLSParams = defaultUpstreamCommonTLS().TlsParams
)

func istioMutualContext(sans []string, sni string, h2 bool) *tlsv3.UpstreamTlsContext {
	common := &tlsv3.CommonTlsContext{
		TlsParams:                      upstreamTLSParams,
		TlsCertificateSdsSecretConfigs: workloadCertSDS,
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(sans)},
				ValidationContextSdsSecretConfig: workloadRootSDS,
			},
		},
		AlpnProtocols: istioALPN,
	}
	if h2 {
		common.AlpnProtocols = istioH2ALPN
	}
	return &tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: sni}
}

// Auto mTLS picks the transport socket per endpoint: the endpoints whose
// pods carry security.istio.io/tlsMode=istio (EDS copies the label into
// this metadata) get mutual TLS, every other endpoint plaintext. See
// Envoy's Cluster.transport_socket_matches: the first match whose fields
// all appear in the endpoint's envoy.transport_socket_match metadata wins,
// and an endpoint that matches none uses the cluster's transport_socket,
// plaintext when it has none (Cluster.transport_socket, cluster.proto).
// So the one match is enough. Istio adds a second, empty one
// ("tlsMode-disabled", a raw buffer socket) that says the same: 140 bytes
// in every cluster, and one more socket factory per cluster in Envoy.
const tlsModeIstioMatch = "tlsMode-" + model.TLSModeIstio

var tlsModeIstioFields = &structpb.Struct{Fields: map[string]*structpb.Value{
	"tlsMode": structpb.NewStringValue(model.TLSModeIstio),
}}

func (b *clusterBuilder) applyAutoMTLS(ctx *tlsv3.UpstreamTlsContext) {
	b.c.TransportSocketMatches = autoMTLSMatches(ctx)
}

func autoMTLSMatches(ctx *tlsv3.UpstreamTlsContext) []*cluster.Cluster_TransportSocketMatch {
	return []*cluster.Cluster_TransportSocketMatch{{
		Name:  tlsModeIstioMatch,
		Match: tlsModeIstioFields,
		TransportSocket: &core.TransportSocket{
			Name:       transportSocketTLS,
			ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: packAny(ctx)},
		},
	}}
}

// originateTLS is SIMPLE (server verified only) or MUTUAL (client
// certificate too). Without an SNI in the rule, it sends externalSNI when
// set and verifies the server against it unless the rule names SANs, else
// the request's Host (autoSNI).
func (b *clusterBuilder) originateTLS(tls *networking.ClientTLSSettings, externalSNI string) *tlsv3.UpstreamTlsContext {
	mutual := tls.GetMode() == networking.ClientTLSSettings_MUTUAL
	common := defaultUpstreamCommonTLS()
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: tls.GetSni()}
	sans := tls.GetSubjectAltNames()
	switch {
	case ctx.Sni != "":
	case externalSNI != "":
		ctx.Sni = externalSNI
		if len(sans) == 0 {
			sans = []string{externalSNI}
		}
	default:
		b.autoSNI(tls)
	}

	credential := tls.GetCredentialName()
	if mutual {
		if credential != "" {
			common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{adsSecret(credentialResource(credential))}
		} else {
			// Validation guarantees both paths for MUTUAL without a credential.
			common.TlsCertificateSdsSecretConfigs = []*tlsv3.SdsSecretConfig{
				agentSecret(fileCertPrefix + tls.GetClientCertificate() + "~" + tls.GetPrivateKey()),
			}
		}
	}
	if !tls.GetInsecureSkipVerify().GetValue() {
		var roots *tlsv3.SdsSecretConfig
		switch {
		case tls.GetCaCertCredentialName() != "":
			roots = adsSecret(credentialResource(tls.GetCaCertCredentialName()))
		case credential != "":
			roots = adsSecret(credentialResource(credential) + caCertSuffix)
		case tls.GetCaCertificates() != "":
			roots = agentSecret(fileRootPrefix + tls.GetCaCertificates())
		default:
			roots = agentSecret(fileRootPrefix + systemRoots)
		}
		defaults := &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: sanMatchers(sans)}
		if crl := tls.GetCaCrl(); crl != "" {
			defaults.Crl = &core.DataSource{Specifier: &core.DataSource_Filename{Filename: crl}}
		}
		common.ValidationContextType = &tlsv3.CommonTlsContext_CombinedValidationContext{
			CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         defaults,
				ValidationContextSdsSecretConfig: roots,
			},
		}
	}
	if b.http2Options() != nil {
		common.AlpnProtocols = []string{"h2"}
	}
	return ctx
}

// autoSNI makes Envoy send the request's host as SNI when the rule sets
// none, and check the server certificate against it when the rule names no
// SANs, as Istio does for SIMPLE and MUTUAL.
func (b *clusterBuilder) autoSNI(tls *networking.ClientTLSSettings) {
	if tls.GetSni() != "" {
		return
	}
	opts := b.httpOptions()
	if opts.UpstreamHttpProtocolOptions == nil {
		opts.UpstreamHttpProtocolOptions = &core.UpstreamHttpProtocolOptions{}
	}
	opts.UpstreamHttpProtocolOptions.AutoSni = true
	if len(tls.GetSubjectAltNames()) == 0 && !tls.GetInsecureSkipVerify().GetValue() {
		opts.UpstreamHttpProtocolOptions.AutoSanValidation = true
	}
}

// credentialResource is the SDS name of a credential: a bare Secret name
// gets the kubernetes:// scheme; a name with a scheme is used as it is.
func credentialResource(name string) string {
	if strings.Contains(name, "://") {
		return name
	}
	return credentialPrefix + name
}

// agentSecret is a secret the local Istio agent serves.
func agentSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{
		Name: name,
		SdsConfig: &core.ConfigSource{
			ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{
				ApiConfigSource: &core.ApiConfigSource{
					ApiType:                   core.ApiConfigSource_GRPC,
					TransportApiVersion:       core.ApiVersion_V3,
					SetNodeOnFirstMessageOnly: true,
					GrpcServices: []*core.GrpcService{{
						TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: agentSDSCluster}},
					}},
				},
			},
			ResourceApiVersion: core.ApiVersion_V3,
		},
	}
}

// adsSecret is a secret the control plane serves on the ADS stream.
func adsSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsConfigSource()}
}

// sanMatchers matches each name exactly, typed by its form: a URI (SPIFFE
// identities), an IP address, or else a DNS name.
func sanMatchers(names []string) []*tlsv3.SubjectAltNameMatcher {
	if len(names) == 0 {
		return nil
	}
	out := make([]*tlsv3.SubjectAltNameMatcher, 0, len(names))
	for _, n := range names {
		out = append(out, &tlsv3.SubjectAltNameMatcher{
			SanType: sanType(n),
			Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: n}},
		})
	}
	return out
}

// sanType is the kind of subject alternative name n is: a SPIFFE ID (URI),
// an IP address, or else a DNS name.
func sanType(n string) tlsv3.SubjectAltNameMatcher_SanType {
	if strings.Contains(n, "://") {
		return tlsv3.SubjectAltNameMatcher_URI
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return tlsv3.SubjectAltNameMatcher_IP_ADDRESS
	}
	return tlsv3.SubjectAltNameMatcher_DNS
}
