package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/webhook"
	"github.com/meshpilot/meshpilot/pkg/webhook/inject"
	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// webhooks are the admission webhooks and the certificate they serve with.
type webhooks struct {
	server *webhook.Server
	certs  *webhook.CertManager
	inject *inject.Handler
	tags   *tags.RevisionTagLister
	log    *slog.Logger
}

// newWebhooks builds the TLS admission server. With the Kubernetes source
// its CA lives in a Secret shared by replicas and its bundle is patched into
// this revision's webhook configurations; without it the CA is in memory.
func (s *Server) newWebhooks() (*webhooks, error) {
	metrics := webhook.NewMetrics(s.registry)
	service := s.istiodService()
	certOpts := webhook.CertOptions{
		Client:      s.kube,
		Namespace:   s.opts.Webhook.Namespace,
		ServiceName: service,
		Revision:    s.opts.Revision,
		Logger:      s.log,
		Metrics:     metrics,
	}
	extra := s.opts.Webhook.ExtraCertNames
	if s.kube == nil {
		// A local run: an API server on this machine calls it by address.
		extra = append([]string{"localhost", "127.0.0.1", "::1"}, extra...)
	}
	for _, name := range extra {
		if ip := net.ParseIP(name); ip != nil {
			certOpts.ExtraIPs = append(certOpts.ExtraIPs, ip)
		} else {
			certOpts.ExtraDNSNames = append(certOpts.ExtraDNSNames, name)
		}
	}
	certs, err := webhook.NewCertManager(certOpts)
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	w := &webhooks{certs: certs, log: s.log}
	configDir := s.opts.Webhook.InjectConfigDir
	if _, err := os.Stat(configDir); configDir != "" && err != nil {
		// No mounted injector ConfigMap: a local run.
		s.log.Info("injection config not found; serving the built-in template", "dir", configDir, "error", err)
		configDir = ""
	}
	injectOpts := inject.Options{
		ConfigDir:       configDir,
		Revision:        s.opts.Revision,
		NamespaceLabels: s.namespaceLabels,
		Kube:            s.kube,
		XDSAddress:      net.JoinHostPort(service+"."+s.opts.Webhook.Namespace+".svc", "15012"),
		DomainSuffix:    s.opts.DomainSuffix,
		Logger:          s.log,
		Metrics:         inject.NewMetrics(s.registry),
	}
	if s.kube != nil {
		w.tags = tags.NewRevisionTagLister(s.kube, s.opts.Revision)
		injectOpts.RevisionTags = w.tags.Tags
	}
	if w.inject, err = inject.NewHandler(injectOpts); err != nil {
		return nil, fmt.Errorf("injection webhook: %w", err)
	}
	handlers := map[string]http.Handler{
		webhook.ValidatePath: webhook.NewValidationHandler(webhook.ValidationOptions{Logger: s.log, Metrics: metrics}),
		"/inject":            w.inject,
	}
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
	w.server = server
	return w, nil
}

// namespaceLabels looks a namespace up in the store; nil when it is not
// known yet, so the injector asks the API instead of judging stale labels.
func (s *Server) namespaceLabels(name string) map[string]string {
	if ns := s.store.Namespace(name); ns != nil {
		return ns.Labels
	}
	return nil
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
	wg.Go(func() {
		if err := w.inject.Run(ctx); err != nil && ctx.Err() == nil {
			w.log.Error("injection config watch stopped; the last loaded config stays in use", "error", err)
		}
	})
	if w.tags != nil {
		wg.Go(func() { w.tags.Run(ctx) })
	}
	err := w.server.Run(ctx)
	wg.Wait()
	if err == nil && certsErr != nil && ctx.Err() == nil {
		err = fmt.Errorf("webhook certificates: %w", certsErr)
	}
	return err
}
