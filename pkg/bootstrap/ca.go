package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/pkg/ca"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/webhook"
)

// meshCA is the mesh's one certificate authority, shared by every TLS
// listener of the control plane: it signs workload certificates on 15012,
// the serving certificates of 15012 and of the webhooks, and its root is
// what istio-ca-root-cert publishes and the webhook configurations'
// caBundle holds. It exists only with a Kubernetes source: callers prove
// who they are with ServiceAccount tokens that only the API server can
// check (TokenReview), and the root lives in a Secret.
type meshCA struct {
	keeper  *ca.Keeper
	kube    kubernetes.Interface
	metrics *ca.Metrics
	log     *slog.Logger
	// rootChanges tells the root publisher that the Keeper reloaded.
	rootChanges <-chan struct{}
}

// newMeshCA returns nil when nothing needs a CA: no cluster, or neither
// 15012 nor the webhooks are served.
func (s *Server) newMeshCA() *meshCA {
	if s.kube == nil || (s.opts.SecureXDSAddr == "" && s.opts.Webhook.Addr == "") {
		return nil
	}
	log := s.log.With("component", "ca")
	metrics := ca.NewMetrics(s.registry)
	keeper := ca.NewKeeper(s.kube, ca.Options{
		Namespace:      s.opts.Webhook.Namespace,
		TrustDomain:    s.opts.TrustDomain,
		DefaultCertTTL: s.opts.CA.WorkloadCertTTL,
		MaxCertTTL:     s.opts.CA.MaxWorkloadCertTTL,
		Logger:         log,
	}, metrics)
	m := &meshCA{keeper: keeper, kube: s.kube, metrics: metrics, log: log, rootChanges: keeper.Subscribe()}
	s.writeBack.leaderOnly(m.publishRoot)
	return m
}

// run loads (or creates) the root and follows changes to the CA Secrets
// until ctx ends. An error means there is no CA: it is returned, and the
// control plane stops rather than run without it.
//
// Every replica loads the root itself, and creates istio-ca-secret when
// neither CA Secret exists: it cannot serve 15012 or the webhooks without
// a root, and must not wait for an election to get one. The race is safe:
// the API server lets one Create win, and the losers load the winner's
// root (ca.LoadOrCreate).
func (m *meshCA) run(ctx context.Context) error {
	if err := m.keeper.Load(ctx); err != nil {
		return fmt.Errorf("load the CA: %w", err)
	}
	return m.keeper.Watch(ctx)
}

// publishRoot keeps istio-ca-root-cert in every namespace equal to the
// root, for one term of leadership (leaderOnly). Only the leader writes
// it: replicas reload a rotated root at slightly different moments, and
// two that disagree would each "repair" every namespace's ConfigMap back
// to their own root, each write waking the other, until both agree; with
// N replicas each namespace would also see N writers where one suffices.
func (m *meshCA) publishRoot(ctx context.Context) {
	if !m.loaded(ctx) {
		return
	}
	publisher := ca.NewRootCertPublisher(m.kube, m.keeper.Current().RootPEM(), m.log)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		if err := publisher.Run(ctx); err != nil {
			m.log.Error("the CA root is not published", "error", err)
		}
	})
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.rootChanges:
			// A change signalled before this term began is harmless:
			// SetRoot ignores the root it already has.
			publisher.SetRoot(m.keeper.Current().RootPEM())
		}
	}
}

// hasRoot reports, without waiting, whether the root is loaded.
func (m *meshCA) hasRoot() bool {
	select {
	case <-m.keeper.Ready():
		return true
	default:
		return false
	}
}

// loaded waits for the root; false when ctx ended first.
func (m *meshCA) loaded(ctx context.Context) bool {
	select {
	case <-m.keeper.Ready():
		return true
	case <-ctx.Done():
		return false
	}
}

// servingCert is a listener's certificate from the mesh CA, for the
// Service's names plus extra, renewed at 80% of its lifetime and whenever
// the root changes.
func (s *Server) servingCert(listener string, extra ...string) (*ca.RotatingServingCert, error) {
	return ca.NewRotatingServingCert(ca.ServingCertOptions{
		Authority: s.ca.keeper,
		Changed:   s.ca.keeper.Subscribe(),
		Names:     append(s.serviceDNSNames(), extra...),
		TTL:       s.opts.CA.ServingCertTTL,
		Listener:  listener,
		Metrics:   s.ca.metrics,
		Logger:    s.ca.log,
	})
}

// secureXDS is the TLS listener on 15012 (Istio's port): the same ADS as
// the plaintext 15010, plus the CA's IstioCertificateService.
//
// The gRPC server is built in New, so that both services are registered
// before anything serves; the CA itself is loaded in run, because reading
// (or creating) its Secret is API work, and New does none.
type secureXDS struct {
	listener net.Listener
	grpc     *grpc.Server
	kube     kubernetes.Interface
	opts     Options
	log      *slog.Logger
	ca       *meshCA
	serving  *ca.RotatingServingCert

	caServer atomic.Pointer[ca.Server]
	// authenticators prove who an xDS client on 15012 is, once the CA is
	// loaded: the certificate it issued, else a ServiceAccount token.
	authenticators atomic.Pointer[[]ca.Authenticator]
}

// newSecureXDS opens the 15012 listener and registers s.xds and the CA on
// a TLS gRPC server. It returns nil when there is nothing to serve.
func (s *Server) newSecureXDS() (*secureXDS, error) {
	if s.opts.SecureXDSAddr == "" {
		return nil, nil
	}
	if s.ca == nil {
		s.log.Info("no CA and no TLS xDS (--secure-xds-addr) without a Kubernetes source: callers prove their identity with ServiceAccount tokens, which only the API server can check")
		return nil, nil
	}
	serving, err := s.servingCert("xds-tls")
	if err != nil {
		return nil, err
	}
	l, err := listenXDS(s.opts.SecureXDSAddr, flagSecureXDSAddr)
	if err != nil {
		return nil, fmt.Errorf("secure xds listener: %w", err)
	}
	x := &secureXDS{
		listener: l,
		kube:     s.kube,
		opts:     s.opts,
		log:      s.ca.log,
		ca:       s.ca,
		serving:  serving,
	}
	// The config is chosen per handshake: the client-certificate pool is
	// the CA's current roots, known only once the CA is loaded and
	// replaced when it reloads. credentials.NewTLS still needs a base
	// config for its ALPN.
	creds := credentials.NewTLS(&tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: x.tlsConfig,
	})
	x.grpc = newXDSGRPCServer(s.opts.MaxConnectionAge, s.opts.MaxConnectionAgeGrace, grpc.Creds(creds), grpc.StreamInterceptor(s.debugID))
	// The same ADS server as 15010; on this listener it requires a proven
	// identity (authenticateXDS).
	s.xds.Register(x.grpc)
	pb.RegisterIstioCertificateServiceServer(x.grpc, &lazyCA{x: x})
	return x, nil
}

func (x *secureXDS) tlsConfig(*tls.ClientHelloInfo) (*tls.Config, error) {
	authority := x.ca.keeper.Current()
	if authority == nil {
		return nil, errors.New("the CA is not loaded yet")
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		// Asked on each handshake, which is what lets it rotate without
		// a restart.
		GetCertificate: x.serving.GetCertificate,
		// Not required: a workload's first call has only its token. Nor
		// verified here: the certificate authenticator verifies the chain
		// against the current roots, and the SPIFFE name, itself. Verified
		// here, a certificate from a root the operator has just replaced
		// would fail the handshake, and the token the same client sends
		// could not renew it.
		ClientAuth: tls.RequestClientCert,
	}, nil
}

// istiodService is the Service clients reach the control plane through,
// istiod or istiod-<revision>, as the injector and the webhooks name it.
func (s *Server) istiodService() string {
	if s.opts.Webhook.Service != "" {
		return s.opts.Webhook.Service
	}
	return webhook.ServiceNameFor(s.opts.Revision)
}

// serviceDNSNames are the names a client may use for the Service, short to
// full, as in istiod's serving certificate.
func (s *Server) serviceDNSNames() []string {
	svc, ns := s.istiodService(), s.opts.Webhook.Namespace
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc." + s.opts.DomainSuffix}
}

// run waits for the CA, then serves until ctx ends or the gRPC server is
// stopped.
func (x *secureXDS) run(ctx context.Context) error {
	if !x.ca.loaded(ctx) {
		return nil
	}
	keeper := x.ca.keeper
	trusted, err := ca.ParseNodeAccounts(x.opts.CA.TrustedNodeAccounts)
	if err != nil {
		return err // validate checked it already
	}
	// A token for the first certificate, the certificate itself for
	// renewals and for xDS, as Istio's agents do.
	tokens := ca.NewTokenAuthenticator(x.kube, ca.TokenOptions{TrustDomain: keeper.Current().TrustDomain(), Logger: x.log})
	certs := ca.NewCertAuthenticator(keeper)
	x.authenticators.Store(&[]ca.Authenticator{certs, tokens})
	server, err := ca.NewServer(ca.ServerOptions{
		Authority:      keeper,
		Authenticators: []ca.Authenticator{tokens, certs},
		NodeAuthorizer: ca.NewNodeAuthorizer(x.kube, trusted),
		Metrics:        x.ca.metrics,
		Logger:         x.log,
	})
	if err != nil {
		return err
	}
	x.caServer.Store(server)
	if _, err := x.serving.Issue(); err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { x.serving.Run(ctx) })
	x.log.Info("CA serving", "addr", x.listener.Addr().String(), "source", string(keeper.Current().Source()),
		"trustDomain", keeper.Current().TrustDomain())
	if err := x.grpc.Serve(x.listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("secure xds: %w", err)
	}
	return nil
}

// authenticateXDS proves who an xDS client is. A plaintext stream (15010)
// proves nothing and gets no identity. A TLS stream (15012) must prove one,
// with a certificate from the mesh CA or a ServiceAccount token (Istio's
// agents send either), and is refused otherwise.
func (s *Server) authenticateXDS(ctx context.Context) (*model.Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil
	}
	if _, tlsPeer := p.AuthInfo.(credentials.TLSInfo); !tlsPeer || s.secure == nil {
		return nil, nil
	}
	authenticators := s.secure.authenticators.Load()
	if authenticators == nil {
		return nil, status.Error(codes.Unavailable, "the CA is not loaded yet")
	}
	// The first credential that proves an identity wins; one that fails
	// (a certificate of a replaced root, say) leaves the others to try.
	var refused []string
	for _, a := range *authenticators {
		caller, err := a.Authenticate(ctx)
		switch {
		case errors.Is(err, ca.ErrNoCredential):
			continue
		case err != nil:
			refused = append(refused, a.Name()+": "+err.Error())
			continue
		}
		id := caller.Identity
		return &model.Identity{TrustDomain: id.TrustDomain, Namespace: id.Namespace, ServiceAccount: id.ServiceAccount}, nil
	}
	if len(refused) > 0 {
		return nil, status.Error(codes.Unauthenticated, strings.Join(refused, "; "))
	}
	return nil, status.Error(codes.Unauthenticated,
		"xDS over TLS needs a client certificate from the mesh CA or a ServiceAccount token (authorization: Bearer)")
}

// lazyCA answers for the CA server once it is loaded. The listener serves
// only after that, so Unavailable is a guard, not an expected answer.
type lazyCA struct {
	pb.UnimplementedIstioCertificateServiceServer
	x *secureXDS
}

func (l *lazyCA) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	s := l.x.caServer.Load()
	if s == nil {
		return nil, status.Error(codes.Unavailable, "the CA is not loaded yet")
	}
	return s.CreateCertificate(ctx, req)
}
