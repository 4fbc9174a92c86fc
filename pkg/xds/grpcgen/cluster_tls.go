package grpcgen

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const (
	noFileTLSReason = "not translated for grpc-go: it takes certificates only from the certificate providers in its own bootstrap, which a rule's files or credentialName cannot name; only ISTIO_MUTUAL, the mesh certificate, is translated"
	noSNIReason     = "not translated for grpc-go, which sends no SNI from xDS by default"
)

// applyClientTLS gives the cluster mutual TLS where the resolved rule says
// ISTIO_MUTUAL. A client that dials with xDS credentials then presents its
// mesh certificate and checks the server's identity; one that dials with
// other credentials ignores it (gRFC A29).
//
// There is no auto mTLS for gRPC clients, as in Istio's gRPC generator: the
// server side cannot tell TLS from plaintext (so a PERMISSIVE server is
// plaintext), and nothing tells the control plane whether a server was
// built with xDS credentials. Mutual TLS is used only where a rule asks.
func applyClientTLS(c *cluster.Cluster, settings *networking.ClientTLSSettings, ids pushcontext.WorkloadIdentities, drop dropReporter) error {
	switch mode := settings.GetMode(); mode {
	case networking.ClientTLSSettings_DISABLE:
		return nil
	case networking.ClientTLSSettings_ISTIO_MUTUAL:
		// Istio's rule: the rule's subjectAltNames, when it names any,
		// replace the identities behind the service.
		sans := settings.GetSubjectAltNames()
		if len(sans) == 0 {
			sans = ids.List()
		}
		if settings.GetSni() != "" {
			drop.field("tls.sni", noSNIReason)
		}
		ts, err := clientMTLS(sans)
		if err != nil {
			return err
		}
		c.TransportSocket = ts
	default:
		drop.field("tls", "mode "+mode.String()+" "+noFileTLSReason)
	}
	return nil
}
