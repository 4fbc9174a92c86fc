package grpcgen

import (
	"errors"
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// The TLS rules below are those of grpc-go v1.85's xdsresource
// (unmarshal_cds.go securityConfigFromCluster, unmarshal_lds.go
// filterChainFromProto), restricted to the fields the generators use, plus
// one of meshpilot's own: every certificate comes from the provider
// instance and certificate names Istio bootstraps define.

func grpcAcceptsClientTLS(ts *core.TransportSocket) error {
	if ts.GetName() != transportSocketTLS {
		return fmt.Errorf("transport socket named %q", ts.GetName())
	}
	ctx := &tlsv3.UpstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return fmt.Errorf("transport socket is not an UpstreamTlsContext: %w", err)
	}
	common := ctx.GetCommonTlsContext()
	if err := grpcAcceptsCommonTLS(common); err != nil {
		return err
	}
	if validationContext(common).GetCaCertificateProviderInstance() == nil {
		return errors.New("client TLS without a root certificate provider")
	}
	return nil
}

func grpcAcceptsServerTLS(ts *core.TransportSocket) error {
	if ts.GetName() != transportSocketTLS {
		return fmt.Errorf("transport socket named %q", ts.GetName())
	}
	ctx := &tlsv3.DownstreamTlsContext{}
	if err := ts.GetTypedConfig().UnmarshalTo(ctx); err != nil {
		return fmt.Errorf("transport socket is not a DownstreamTlsContext: %w", err)
	}
	if ctx.GetRequireSni().GetValue() {
		return errors.New("require_sni")
	}
	if ctx.GetOcspStaplePolicy() != tlsv3.DownstreamTlsContext_LENIENT_STAPLING {
		return fmt.Errorf("ocsp_staple_policy %s", ctx.GetOcspStaplePolicy())
	}
	common := ctx.GetCommonTlsContext()
	if err := grpcAcceptsCommonTLS(common); err != nil {
		return err
	}
	if common.GetTlsCertificateProviderInstance() == nil {
		return errors.New("server TLS without an identity certificate provider")
	}
	vc := validationContext(common)
	//lint:ignore SA1019 the field grpc-go reads, and NACKs on a server
	if len(vc.GetMatchSubjectAltNames()) > 0 {
		return errors.New("match_subject_alt_names on the server side")
	}
	if ctx.GetRequireClientCertificate().GetValue() && vc.GetCaCertificateProviderInstance() == nil {
		return errors.New("require_client_certificate without a root certificate provider")
	}
	return nil
}

func grpcAcceptsCommonTLS(common *tlsv3.CommonTlsContext) error {
	switch {
	case common == nil:
		return errors.New("no common_tls_context")
	case common.GetTlsParams() != nil:
		return errors.New("tls_params")
	case common.GetCustomHandshaker() != nil:
		return errors.New("custom_handshaker")
	case len(common.GetTlsCertificates()) > 0 || len(common.GetTlsCertificateSdsSecretConfigs()) > 0:
		return errors.New("certificates not from a certificate provider")
	}
	if err := knownProvider(common.GetTlsCertificateProviderInstance(), identityCertName); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	switch common.GetValidationContextType().(type) {
	case *tlsv3.CommonTlsContext_ValidationContext, *tlsv3.CommonTlsContext_CombinedValidationContext, nil:
	default:
		return fmt.Errorf("validation context of type %T", common.GetValidationContextType())
	}
	vc := validationContext(common)
	switch {
	case len(vc.GetVerifyCertificateSpki()) > 0, len(vc.GetVerifyCertificateHash()) > 0,
		vc.GetRequireSignedCertificateTimestamp().GetValue(), vc.GetCrl() != nil, vc.GetCustomValidatorConfig() != nil:
		return errors.New("a validation field grpc-go NACKs")
	case len(vc.GetMatchTypedSubjectAltNames()) > 0:
		// Not NACKed, but ignored: the server's identity would go unchecked.
		return errors.New("match_typed_subject_alt_names, which grpc-go ignores")
	}
	if vc != nil {
		if err := knownProvider(vc.GetCaCertificateProviderInstance(), rootCertName); err != nil {
			return fmt.Errorf("root: %w", err)
		}
	}
	return nil
}

func validationContext(common *tlsv3.CommonTlsContext) *tlsv3.CertificateValidationContext {
	if vc := common.GetValidationContext(); vc != nil {
		return vc
	}
	return common.GetCombinedValidationContext().GetDefaultValidationContext()
}

func knownProvider(p *tlsv3.CertificateProviderPluginInstance, certName string) error {
	if p == nil {
		return nil
	}
	if p.GetInstanceName() != certProviderInstance || p.GetCertificateName() != certName {
		return fmt.Errorf("provider %q certificate %q, want %q %q", p.GetInstanceName(), p.GetCertificateName(), certProviderInstance, certName)
	}
	return nil
}
