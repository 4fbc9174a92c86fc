package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/ca"
	"github.com/meshpilot/meshpilot/pkg/webhook"
	"github.com/meshpilot/meshpilot/pkg/webhook/inject"
	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// webhooks are the admission webhooks, their serving certificate from the
// mesh CA, and the patcher that puts the mesh root into their
// configurations' caBundle.
type webhooks struct {
	server  *webhook.Server
	ca      *meshCA
	serving *ca.RotatingServingCert
	bundles *webhook.BundlePatcher
	inject  *inject.Handler
	tags    *tags.RevisionTagLister
	log     *slog.Logger
}

// newWebhooks builds the TLS admission server. It returns nil without a
// Kubernetes source: the only caller of an admission webhook is an API
// server, and without one there is neither a configuration to patch a
// caBundle into nor a mesh CA to sign the serving certificate.
func (s *Server) newWebhooks() (*webhooks, error) {
	if s.ca == nil {
		s.log.Info("no admission webhooks (--webhook-addr) without a Kubernetes source: only an API server calls them, and their certificate comes from the mesh CA, which needs one")
		return nil, nil
	}
	metrics := webhook.NewMetrics(s.registry)
	service := s.istiodService()
	// ExtraCertNames: an API server that calls the webhooks by URL (an
	// address, or a name outside the Service's).
	serving, err := s.servingCert("webhook", s.opts.Webhook.ExtraCertNames...)
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	bundles, err := webhook.NewBundlePatcher(webhook.BundleOptions{
		Client:    s.kube,
		Namespace: s.opts.Webhook.Namespace,
		Revision:  s.opts.Revision,
		Bundle: func() []byte {
			if a := s.ca.keeper.Current(); a != nil {
				return a.RootPEM()
			}
			return nil
		},
		Changed: s.ca.keeper.Subscribe(),
		Logger:  s.log,
		Metrics: metrics,
	})
	if err != nil {
		return nil, err
	}
	w := &webhooks{ca: s.ca, serving: serving, bundles: bundles, log: s.log}
	s.writeBack.revisionLeaderOnly(w.patchBundles)
	configDir := s.opts.Webhook.InjectConfigDir
	switch _, err := os.Stat(configDir); {
	case configDir == "":
		// A local run: nothing to look for, so nothing has gone wrong.
		s.log.Info("sidecar injection uses the built-in template (no --inject-config-dir)")
	case err != nil:
		// Asked for, yet absent: the injector ConfigMap was not mounted.
		s.log.Warn("injection config not readable; serving the built-in template", "dir", configDir, "reason", err)
		configDir = ""
	}
	w.tags = tags.NewRevisionTagLister(s.kube, s.opts.Revision)
	injectOpts := inject.Options{
		ConfigDir:          configDir,
		Revision:           s.opts.Revision,
		NamespaceLabels:    s.namespaceLabels,
		Kube:               s.kube,
		RevisionTags:       w.tags.Tags,
		ConfirmRevisionTag: w.tags.PointsHere,
		XDSAddress:         net.JoinHostPort(service+"."+s.opts.Webhook.Namespace+".svc", "15012"),
		DomainSuffix:       s.opts.DomainSuffix,
		Logger:             s.log,
		Metrics:            inject.NewMetrics(s.registry),
	}
	if w.inject, err = inject.NewHandler(injectOpts); err != nil {
		return nil, fmt.Errorf("injection webhook: %w", err)
	}
	handlers := map[string]http.Handler{
		webhook.ValidatePath: webhook.NewValidationHandler(webhook.ValidationOptions{Logger: s.log, Metrics: metrics}),
		"/inject":            w.inject,
	}
	grace := s.opts.ShutdownGrace
	if grace == 0 {
		grace = -1 // no grace means none, not the package's default
	}
	server, err := webhook.NewServer(webhook.ServerOptions{
		Addr:     s.opts.Webhook.Addr,
		Handlers: handlers,
		Certs:    serving,
		Logger:   s.log,
		Metrics:  metrics,
		// In-flight reviews drain within the grace that bounds the whole
		// shutdown (Run stops the webhooks as the shutdown begins).
		ShutdownTimeout: grace,
	})
	if err != nil {
		// The server's errors name it already.
		return nil, namedListenError(err, flagWebhookAddr)
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

// run serves at once, and keeps the certificate fresh once the mesh CA is
// loaded, until ctx ends. Until the first certificate is issued, handshakes
// fail and the API server retries (or applies the failure policy), as with
// a control plane still starting. Every replica serves the webhooks; the
// caBundles are patched by the revision's leader alone (patchBundles).
func (w *webhooks) run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		if !w.ca.loaded(ctx) {
			return
		}
		w.serving.Run(ctx)
	})
	wg.Go(func() {
		if err := w.inject.Run(ctx); err != nil && ctx.Err() == nil {
			w.log.Error("injection config watch stopped; the last loaded config stays in use", "error", err)
		}
	})
	wg.Go(func() { w.tags.Run(ctx) })
	err := w.server.Run(ctx)
	wg.Wait()
	return err
}

// patchBundles keeps this revision's webhook configurations trusting the
// mesh root, for one term of this revision's leadership
// (revisionLeaderOnly). Only the leader
// patches: during a root rotation replicas that have and have not yet
// reloaded would each put their own root back, waking one another, and the
// API server would see N writers per configuration where one suffices.
func (w *webhooks) patchBundles(ctx context.Context) {
	if !w.ca.loaded(ctx) {
		return
	}
	if err := w.bundles.Run(ctx); err != nil && ctx.Err() == nil {
		w.log.Error("webhook caBundles are not kept current this term", "error", err)
	}
}
