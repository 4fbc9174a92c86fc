package bootstrap

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/webhook"
)

// webhooks are the admission webhooks and the certificate they serve with.
type webhooks struct {
	server *webhook.Server
	certs  *webhook.CertManager
}

// newWebhooks builds the TLS admission server. With the Kubernetes source
// its CA lives in a Secret shared by replicas and its bundle is patched into
// this revision's webhook configurations; without it the CA is in memory.
func (s *Server) newWebhooks(handlers map[string]http.Handler) (*webhooks, error) {
	metrics := webhook.NewMetrics(s.registry)
	service := s.opts.Webhook.Service
	if service == "" {
		service = webhook.ServiceNameFor(s.opts.Revision)
	}
	certOpts := webhook.CertOptions{
		Client:      s.kube,
		Namespace:   s.opts.Webhook.Namespace,
		ServiceName: service,
		Revision:    s.opts.Revision,
		Logger:      s.log,
		Metrics:     metrics,
	}
	if s.kube == nil {
		// A local run: an API server on this machine calls it by address.
		certOpts.ExtraDNSNames = []string{"localhost"}
		certOpts.ExtraIPs = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	certs, err := webhook.NewCertManager(certOpts)
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	handlers[webhook.ValidatePath] = webhook.NewValidationHandler(webhook.ValidationOptions{Logger: s.log, Metrics: metrics})
	server, err := webhook.NewServer(webhook.ServerOptions{
		Addr:     s.opts.Webhook.Addr,
		Handlers: handlers,
		Certs:    certs,
		Logger:   s.log,
		Metrics:  metrics,
	})
	if err != nil {
		return nil, fmt.Errorf("webhook server: %w", err)
	}
	return &webhooks{server: server, certs: certs}, nil
}

// run issues the first certificate, then serves and keeps the certificate
// fresh until ctx ends.
func (w *webhooks) run(ctx context.Context) error {
	if err := w.certs.Init(ctx); err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	var (
		wg       sync.WaitGroup
		certsErr error
	)
	wg.Go(func() { certsErr = w.certs.Run(ctx) })
	err := w.server.Run(ctx)
	wg.Wait()
	if err == nil && certsErr != nil && ctx.Err() == nil {
		err = fmt.Errorf("webhook certificates: %w", certsErr)
	}
	return err
}
