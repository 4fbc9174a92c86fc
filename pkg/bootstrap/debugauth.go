package bootstrap

import (
	"errors"
	"net"
	"net/http"

	"google.golang.org/grpc/metadata"

	"github.com/meshpilot/meshpilot/pkg/ca"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// errNoDebugCredential: the request proved no identity.
var errNoDebugCredential = errors.New("no credential")

// debugAuth guards the debug endpoints of both HTTP ports, as istiod
// guards those of its monitoring port: a request from this host passes
// (port-forwards and the process itself); any other needs a ServiceAccount
// token for the mesh CA's audience (Authorization: Bearer, checked with a
// TokenReview) of the root namespace, where the control plane and its
// operators' tools run. The debug port (8080) needs it as much as the
// monitoring port: the Service leaves it out, but any pod can dial the
// control plane's pod address, and the endpoints list every proxy and what
// it was sent.
func (s *Server) debugAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fromLoopback(r) {
			next.ServeHTTP(w, r)
			return
		}
		authenticate := s.debugAuthenticate
		if authenticate == nil {
			authenticate = s.authenticateDebugRequest
		}
		id, err := authenticate(r)
		if err != nil || id == nil {
			s.log.Info("refused a debug request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			http.Error(w, "debug endpoints on this port need a ServiceAccount token of namespace "+s.opts.RootNamespace+
				" (Authorization: Bearer, audience "+ca.DefaultAudience+"), or a request from localhost", http.StatusUnauthorized)
			return
		}
		if id.Namespace != s.opts.RootNamespace {
			http.Error(w, "debug endpoints are for ServiceAccounts of namespace "+s.opts.RootNamespace+", not "+id.String(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authenticateDebugRequest proves the caller with the token authenticator
// of TLS xDS (15012); without a Kubernetes source there is none, and only
// local requests pass.
func (s *Server) authenticateDebugRequest(r *http.Request) (*model.Identity, error) {
	if s.secure == nil {
		return nil, errors.New("tokens can be checked only with a Kubernetes source")
	}
	authenticators := s.secure.authenticators.Load()
	if authenticators == nil {
		return nil, errors.New("the CA is not loaded yet")
	}
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return nil, errNoDebugCredential
	}
	ctx := metadata.NewIncomingContext(r.Context(), metadata.MD{"authorization": values})
	for _, a := range *authenticators {
		caller, err := a.Authenticate(ctx)
		switch {
		case errors.Is(err, ca.ErrNoCredential):
			continue
		case err != nil:
			return nil, err
		}
		id := caller.Identity
		return &model.Identity{TrustDomain: id.TrustDomain, Namespace: id.Namespace, ServiceAccount: id.ServiceAccount}, nil
	}
	return nil, errNoDebugCredential
}
