package ca

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
)

// ServerOptions assemble a Server.
type ServerOptions struct {
	// Authority signs; each call uses the one current at that moment, so
	// a Keeper's reloaded root takes effect without a new Server.
	Authority AuthorityProvider
	// Authenticators are tried in order; the first that accepts wins.
	// Usually a TokenAuthenticator, then a CertAuthenticator.
	Authenticators []Authenticator
	// NodeAuthorizer allows impersonation; nil refuses every
	// ImpersonatedIdentity request.
	NodeAuthorizer *NodeAuthorizer
	// Metrics default to unregistered ones.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Server is the IstioCertificateService. Register it on a gRPC server whose
// listener uses TLS with client certificates requested (not required: the
// first certificate is obtained with a token), e.g.
// tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: a.RootPool()}.
type Server struct {
	pb.UnimplementedIstioCertificateServiceServer
	ca      AuthorityProvider
	authn   []Authenticator
	nodes   *NodeAuthorizer
	metrics *Metrics
	log     *slog.Logger
	// rbacLog reports each permission the API server refuses the CA, once
	// per rbacLogInterval rather than once per call.
	rbacLog *causeLog
	// unavailableLog reports an API server that does not answer the CA's
	// checks, once per unavailableLogInterval for each kind of check.
	unavailableLog *causeLog
}

// rbacLogInterval is how often a missing permission is reported again
// while calls keep failing for want of it.
const rbacLogInterval = 5 * time.Minute

// unavailableLogInterval is how often an API server outage is reported
// again while calls keep failing for it. Shorter than rbacLogInterval: an
// outage tends to pass by itself, and the log should show about when.
const unavailableLogInterval = time.Minute

func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Authority == nil || opts.Authority.Current() == nil {
		return nil, errors.New("ca: ServerOptions.Authority is required and must be loaded")
	}
	if len(opts.Authenticators) == 0 {
		return nil, errors.New("ca: ServerOptions.Authenticators is empty: no caller could ever be proven")
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Metrics.observeAuthority(opts.Authority.Current())
	return &Server{ca: opts.Authority, authn: opts.Authenticators, nodes: opts.NodeAuthorizer,
		metrics: opts.Metrics, log: opts.Logger,
		rbacLog: newCauseLog(rbacLogInterval), unavailableLog: newCauseLog(unavailableLogInterval)}, nil
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterIstioCertificateServiceServer(g, s) }

// CreateCertificate authenticates the caller, checks an impersonation
// request, signs the CSR for the proven (or allowed impersonated) identity
// and answers cert_chain = [leaf, intermediates..., root], the order istiod
// uses: clients take the last element as the root.
func (s *Server) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	s.metrics.CSRs.Inc()
	log := s.log.With("peer", peerAddr(ctx))

	caller, err := s.authenticate(ctx)
	if err != nil {
		s.metrics.AuthnFailures.Inc()
		if errors.Is(err, ErrNoIdentity) {
			s.metrics.IDExtractionErrors.Inc()
		}
		switch {
		case errors.Is(err, ErrCAForbidden):
			return nil, s.refusedToCA(err)
		case errors.Is(err, ErrUnavailable):
			return nil, s.cannotCheck("credentials", err)
		}
		log.Warn("CA refused an unauthenticated caller", "reason", err.Error())
		return nil, status.Error(codes.Unauthenticated, "authentication failed: "+err.Error())
	}
	log = log.With("caller", caller.Identity.String(), "via", caller.Method)

	id := caller.Identity
	if v, ok := req.GetMetadata().GetFields()[ImpersonatedIdentityKey]; ok {
		target, err := s.impersonate(ctx, caller, v)
		if err != nil {
			switch {
			case errors.Is(err, ErrCAForbidden):
				return nil, s.refusedToCA(err)
			case errors.Is(err, ErrUnavailable):
				// Neither a refusal nor the caller's fault, so not in
				// AuthzFailures.
				return nil, s.cannotCheck("impersonation", err)
			}
			log.Warn("CA refused impersonation", "reason", err.Error())
			switch {
			case errors.Is(err, ErrNoIdentity):
				s.metrics.IDExtractionErrors.Inc()
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			s.metrics.AuthzFailures.Inc()
			return nil, status.Error(codes.PermissionDenied, err.Error())
		}
		id = target
		log = log.With("impersonated", id.String())
	}

	// One Authority for the whole call, so the leaf and the root it is
	// answered with belong together even while the root is being replaced.
	authority := s.ca.Current()
	cert, err := authority.Sign([]byte(req.GetCsr()), id, requestedTTL(req.GetValidityDuration()))
	if err != nil {
		var se *SignError
		label := ErrCertGen.Label
		if errors.As(err, &se) {
			label = se.Kind.Label
		}
		s.metrics.SignErrors.WithLabelValues(label).Inc()
		if errors.Is(err, ErrCSR) {
			s.metrics.CSRParseErrors.Inc()
		}
		log.Warn("CA refused to sign", "identity", id.String(), "reason", err.Error())
		switch {
		case errors.Is(err, ErrCANotValid):
			// Not the caller's fault, and not a passing failure: nothing is
			// signed until an operator replaces the CA's key material. The
			// reason names a certificate and a date, no secret.
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		case errors.Is(err, ErrCertGen):
			return nil, status.Error(codes.Internal, "the CA failed to sign")
		}
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	chain := append(cert.ChainPEM, string(authority.rootPEM))
	s.metrics.Success.Inc()
	log.Info("CA issued a certificate", "identity", id.String(), "serial", cert.Leaf.SerialNumber.Text(16),
		"notAfter", cert.Leaf.NotAfter.Format(time.RFC3339))
	return &pb.IstioCertificateResponse{CertChain: chain}, nil
}

// refusedToCA answers a call the CA could not check because the API server
// refused the CA's own request (err is an ErrCAForbidden): it counts the
// call and reports the missing permission, at most once per
// rbacLogInterval, with the calls refused for want of it since.
//
// The answer is FailedPrecondition: the CA is not in a state to serve the
// call until an operator fixes its RBAC, as for an expired CA chain, and
// the caller is not to blame. Not Unavailable, which clients take for an
// outage and retry, so the fault passes for one; not Internal, which
// claims a broken invariant of the CA, and which Istio's agents retry too
// (their CARetryOptions).
func (s *Server) refusedToCA(err error) error {
	s.metrics.CheckErrors.WithLabelValues(checkErrRBAC).Inc()
	permission := "unknown"
	var missing *missingPermission
	if errors.As(err, &missing) {
		permission = missing.permission
	}
	if logNow, calls := s.rbacLog.note(permission); logNow {
		s.log.Error("the API server refuses the CA a permission it needs to check callers: grant it to the CA's ServiceAccount",
			"permission", permission, "calls", calls, "error", err.Error())
	}
	return status.Error(codes.FailedPrecondition,
		"the CA may not query the API server to check this call; its operator must fix the CA's RBAC")
}

// cannotCheck answers a call the CA could not decide because the API
// server gave no answer to its check of the caller (err wraps
// ErrUnavailable): Unavailable, so that the caller retries. check says
// what was being checked ("credentials", "impersonation").
//
// An outage fails every call that needs the API server, and a connect
// storm (every proxy of the mesh renewing after a restart) makes
// thousands: each is counted, so the metrics show the outage's extent,
// but the log says so once per unavailableLogInterval for each check,
// with the calls since, rather than once per call.
func (s *Server) cannotCheck(check string, err error) error {
	s.metrics.CheckErrors.WithLabelValues(checkErrUnavailable).Inc()
	if logNow, calls := s.unavailableLog.note(check); logNow {
		s.log.Warn("the CA cannot check callers now: the API server does not answer; they are told to retry",
			"check", check, "calls", calls, "error", err.Error())
	}
	return status.Errorf(codes.Unavailable, "the CA cannot check the %s now; retry", check)
}

// authenticate tries each authenticator in order. When all fail, the error
// says what each one found, so that the caller can tell a missing token
// from a refused one.
func (s *Server) authenticate(ctx context.Context) (*Caller, error) {
	var reasons []string
	var errs []error
	for _, a := range s.authn {
		c, err := a.Authenticate(ctx)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if errors.Is(err, ErrNoCredential) {
			reasons = append(reasons, a.Name()+": none presented")
		} else {
			reasons = append(reasons, a.Name()+": "+err.Error())
		}
	}
	joined := errors.Join(errs...)
	return nil, fmt.Errorf("%s%w", strings.Join(reasons, "; "), wrapOnly{joined})
}

// wrapOnly lets errors.Is see the causes without repeating their text.
type wrapOnly struct{ err error }

func (w wrapOnly) Error() string { return "" }
func (w wrapOnly) Unwrap() error { return w.err }

// impersonate checks an ImpersonatedIdentity request.
func (s *Server) impersonate(ctx context.Context, caller *Caller, v *structpb.Value) (Identity, error) {
	if s.nodes == nil {
		return Identity{}, fmt.Errorf("%w: impersonation is not enabled on this CA", ErrPermissionDenied)
	}
	if !s.nodes.trusted[caller.SA()] {
		// Decided before looking at the value, so an untrusted caller learns
		// nothing about how the CA parses it.
		return Identity{}, fmt.Errorf("%w: %s is not a trusted node account and may not impersonate", ErrPermissionDenied, caller.Identity)
	}
	str, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return Identity{}, fmt.Errorf("%w: metadata %s must be a string", ErrNoIdentity, ImpersonatedIdentityKey)
	}
	target, err := ParseIdentity(str.StringValue)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: metadata %s: %v", ErrNoIdentity, ImpersonatedIdentityKey, err)
	}
	return target, s.nodes.Authorize(ctx, caller, target)
}

// requestedTTL is validity_duration (seconds) as a Duration, saturated
// rather than overflowed: a huge request would otherwise wrap around to an
// arbitrary lifetime, negative (the default) or within the maximum, and be
// signed with it instead of refused.
func requestedTTL(seconds int64) time.Duration {
	if seconds > int64(math.MaxInt64/time.Second) {
		return math.MaxInt64
	}
	return time.Duration(seconds) * time.Second
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}
