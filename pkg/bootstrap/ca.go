package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

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

// servingCertRenewFraction is how far into its lifetime the 15012 serving
// certificate is replaced: early enough that a failed renewal has hours of
// retries left, late enough not to churn.
const servingCertRenewFraction = 0.8

// secureXDS is the TLS listener on 15012 (Istio's port): the same ADS as
// the plaintext 15010, plus the CA's IstioCertificateService. It exists
// only with a Kubernetes source, because callers prove who they are with
// ServiceAccount tokens that only the API server can check (TokenReview).
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
	metrics  *ca.Metrics
	service  string // istiod[-<rev>], named in the serving certificate

	// tlsConfig is nil until the CA is loaded; handshakes fail until then.
	tlsConfig atomic.Pointer[tls.Config]
	caServer  atomic.Pointer[ca.Server]
	cert      atomic.Pointer[tls.Certificate]
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
	if s.kube == nil {
		s.log.Info("no CA and no TLS xDS (--secure-xds-addr) without a Kubernetes source: callers prove their identity with ServiceAccount tokens, which only the API server can check")
		return nil, nil
	}
	l, err := net.Listen("tcp", s.opts.SecureXDSAddr)
	if err != nil {
		return nil, fmt.Errorf("secure xds listener: %w", err)
	}
	x := &secureXDS{
		listener: l,
		kube:     s.kube,
		opts:     s.opts,
		log:      s.log.With("component", "ca"),
		metrics:  ca.NewMetrics(s.registry),
		service:  s.istiodService(),
	}
	// The config served to each client is chosen per handshake, because the
	// client-certificate pool (the CA's roots) is known only once the CA is
	// loaded. credentials.NewTLS still needs a base config for its ALPN.
	creds := credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			if c := x.tlsConfig.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("the CA is not loaded yet")
		},
	})
	x.grpc = newXDSGRPCServer(grpc.Creds(creds))
	// The same ADS server as 15010; on this listener it requires a proven
	// identity (authenticateXDS).
	s.xds.Register(x.grpc)
	pb.RegisterIstioCertificateServiceServer(x.grpc, &lazyCA{x: x})
	return x, nil
}

// istiodService is the Service clients reach the control plane through,
// istiod or istiod-<revision>, as the injector and the webhooks name it.
func (s *Server) istiodService() string {
	if s.opts.Webhook.Service != "" {
		return s.opts.Webhook.Service
	}
	return webhook.ServiceNameFor(s.opts.Revision)
}

// dnsNames are the names a client may use for the Service, short to full,
// as in istiod's serving certificate.
func (x *secureXDS) dnsNames() []string {
	ns := x.opts.Webhook.Namespace
	return []string{
		x.service,
		x.service + "." + ns,
		x.service + "." + ns + ".svc",
		x.service + "." + ns + ".svc." + x.opts.DomainSuffix,
	}
}

// run loads (or creates) the CA, publishes its root, and serves until ctx
// ends or the gRPC server is stopped. An error means the CA cannot work:
// it is returned, and the control plane stops rather than run without it.
func (x *secureXDS) run(ctx context.Context) error {
	authority, err := ca.LoadOrCreate(ctx, x.kube, ca.Options{
		Namespace:      x.opts.Webhook.Namespace,
		TrustDomain:    x.opts.TrustDomain,
		DefaultCertTTL: x.opts.CA.WorkloadCertTTL,
		MaxCertTTL:     x.opts.CA.MaxWorkloadCertTTL,
		Logger:         x.log,
	})
	if err != nil {
		return fmt.Errorf("load the CA: %w", err)
	}
	trusted, err := ca.ParseNodeAccounts(x.opts.CA.TrustedNodeAccounts)
	if err != nil {
		return err // validate checked it already
	}
	// A token for the first certificate, the certificate itself for
	// renewals and for xDS, as Istio's agents do.
	tokens := ca.NewTokenAuthenticator(x.kube, ca.TokenOptions{TrustDomain: authority.TrustDomain(), Logger: x.log})
	certs := ca.NewCertAuthenticator(authority)
	x.authenticators.Store(&[]ca.Authenticator{certs, tokens})
	server, err := ca.NewServer(ca.ServerOptions{
		Authority:      authority,
		Authenticators: []ca.Authenticator{tokens, certs},
		NodeAuthorizer: ca.NewNodeAuthorizer(x.kube, trusted),
		Metrics:        x.metrics,
		Logger:         x.log,
	})
	if err != nil {
		return err
	}
	x.caServer.Store(server)
	renewAt, err := x.renew(authority)
	if err != nil {
		return err
	}
	x.tlsConfig.Store(&tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		// Returning the current certificate on each handshake is what
		// lets it rotate without a restart.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return x.cert.Load(), nil },
		// Not required: a workload's first call has only its token.
		// Verified against our roots when given; the CA's certificate
		// authenticator checks the chain and SPIFFE name again itself.
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  authority.RootPool(),
	})

	var wg sync.WaitGroup
	defer wg.Wait()
	publisher := ca.NewRootCertPublisher(x.kube, authority.RootPEM(), x.log)
	wg.Go(func() {
		if err := publisher.Run(ctx); err != nil {
			x.log.Error("the CA root is not published", "error", err)
		}
	})
	wg.Go(func() { x.keepRenewing(ctx, authority, renewAt) })
	x.log.Info("CA serving", "addr", x.listener.Addr().String(), "source", string(authority.Source()),
		"trustDomain", authority.TrustDomain(), "dnsNames", x.dnsNames())
	if err := x.grpc.Serve(x.listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("secure xds: %w", err)
	}
	return nil
}

// renew issues a new serving certificate and says when to replace it.
func (x *secureXDS) renew(authority *ca.Authority) (time.Time, error) {
	issued := time.Now()
	cert, err := authority.ServingCertificate(x.dnsNames(), x.opts.CA.ServingCertTTL)
	if err != nil {
		return time.Time{}, fmt.Errorf("15012 serving certificate: %w", err)
	}
	x.cert.Store(cert)
	life := cert.Leaf.NotAfter.Sub(issued)
	renewAt := issued.Add(time.Duration(float64(life) * servingCertRenewFraction))
	x.log.Info("15012 serving certificate issued", "notAfter", cert.Leaf.NotAfter, "renewAt", renewAt)
	return renewAt, nil
}

func (x *secureXDS) keepRenewing(ctx context.Context, authority *ca.Authority, renewAt time.Time) {
	for {
		// At least a second apart, so a certificate capped by a nearly
		// expired CA cannot turn this into a busy loop.
		wait := max(time.Until(renewAt), time.Second)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		next, err := x.renew(authority)
		if err != nil {
			x.log.Error("15012 serving certificate not renewed; retrying in a minute", "error", err)
			next = time.Now().Add(time.Minute)
		}
		renewAt = next
	}
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
	for _, a := range *authenticators {
		caller, err := a.Authenticate(ctx)
		switch {
		case errors.Is(err, ca.ErrNoCredential):
			continue
		case err != nil:
			return nil, status.Errorf(codes.Unauthenticated, "%s: %v", a.Name(), err)
		}
		id := caller.Identity
		return &model.Identity{TrustDomain: id.TrustDomain, Namespace: id.Namespace, ServiceAccount: id.ServiceAccount}, nil
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
