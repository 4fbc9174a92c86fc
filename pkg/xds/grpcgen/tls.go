package grpcgen

import (
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// grpc-go takes certificates only from certificate-provider instances named
// in its own bootstrap (gRFC A29), never over SDS. These are the names
// Istio's agent writes into the bootstrap it generates and Istio's gRPC
// generator refers to, so existing bootstraps work unchanged: one instance,
// "default", whose "default" certificate is the workload's and whose
// "ROOTCA" certificate is the mesh root. (The file_watcher plugin ignores
// certificate names; they matter to other plugins.)
const (
	certProviderInstance = "default"
	identityCertName     = "default"
	rootCertName         = "ROOTCA"
	// grpc-go NACKs a transport socket with any other name.
	transportSocketTLS = "envoy.transport_sockets.tls"
)

// newServerMTLS is a STRICT inbound filter chain's transport socket. It is
// the same for every server, so listeners share one, marshalled once.
func newServerMTLS() *core.TransportSocket {
	server, err := tlsTransportSocket(&tlsv3.DownstreamTlsContext{
		CommonTlsContext:         commonTLSContext(nil),
		RequireClientCertificate: wrapperspb.Bool(true),
	})
	if err != nil {
		panic(fmt.Sprintf("marshal the inbound TLS context: %v", err)) // a constant message
	}
	return server
}

// clientMTLS is the transport socket of a cluster under ISTIO_MUTUAL: the
// workload's certificate, the mesh root, and the server identities it must
// present (any identity the root signed when sans is empty, as in Istio).
func clientMTLS(sans []string) (*core.TransportSocket, error) {
	return tlsTransportSocket(&tlsv3.UpstreamTlsContext{CommonTlsContext: commonTLSContext(sans)})
}

// commonTLSContext uses only the fields grpc-go reads: the current
// CertificateProviderPluginInstance fields (grpc-go ≥ 1.66) and
// match_subject_alt_names. The typed SAN matchers Envoy prefers are ignored
// by grpc-go, which would then check no SAN at all. Servers get no SAN
// matchers: grpc-go NACKs them there.
func commonTLSContext(sans []string) *tlsv3.CommonTlsContext {
	validation := &tlsv3.CertificateValidationContext{
		CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
			InstanceName: certProviderInstance, CertificateName: rootCertName,
		},
	}
	for _, san := range sans {
		//lint:ignore SA1019 grpc-go reads only this field (see above)
		validation.MatchSubjectAltNames = append(validation.MatchSubjectAltNames,
			&matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: san}})
	}
	return &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{
			InstanceName: certProviderInstance, CertificateName: identityCertName,
		},
		ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: validation},
	}
}

func tlsTransportSocket(ctx proto.Message) (*core.TransportSocket, error) {
	a, err := marshalAny(ctx)
	if err != nil {
		return nil, err
	}
	return &core.TransportSocket{
		Name:       transportSocketTLS,
		ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a},
	}, nil
}
