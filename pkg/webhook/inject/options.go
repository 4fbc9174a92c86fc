package inject

import (
	"context"
	"errors"
	"log/slog"

	"k8s.io/client-go/kubernetes"
)

// Options configure a Handler.
type Options struct {
	// ConfigDir holds the files "config" (YAML: policy, templates,
	// defaultTemplates) and "values" (JSON or YAML values for the
	// templates) of the mounted istio-sidecar-injector[-REV] ConfigMap.
	// Run watches it and reloads on change. Empty means the built-in
	// template and values (DefaultConfig, DefaultValues), for runs without
	// a mounted ConfigMap.
	ConfigDir string
	// Revision is the control-plane revision this injector serves; "" is
	// the default revision.
	Revision string
	// NamespaceLabels returns a namespace's labels, nil when the namespace
	// is unknown (the caller's cache may lag a namespace just created).
	NamespaceLabels func(namespace string) map[string]string
	// Kube reads a namespace from the API server when NamespaceLabels is nil
	// or does not know the namespace. At least one of the two is required.
	Kube kubernetes.Interface
	// RevisionTags returns the revision tags that point at Revision (the
	// istio.io/tag labels of tag webhooks labelled istio.io/rev=Revision;
	// "default" when the default tag does), and whether that list is known
	// yet. A Pod that asks for one of them is this injector's. Nil, or a
	// list not yet known (a watch still syncing after a restart), trusts
	// the webhook selectors for the revision name, as Istio does: judging
	// by an empty list would admit every tagged Pod without its sidecar.
	// The other opt-in rules are still checked.
	RevisionTags func() (tags []string, known bool)
	// ConfirmRevisionTag asks the API server, past RevisionTags' watch,
	// whether a tag points at Revision. It is asked only when the watch
	// says no: a tag that has just moved here reaches the injector before
	// the watch does, and skipping the Pod would create it without its
	// sidecar. An error trusts the webhook selectors. Nil trusts the watch.
	ConfirmRevisionTag func(ctx context.Context, tag string) (bool, error)
	// XDSAddress is where proxies reach the control plane, default
	// istiod[-REV].istio-system.svc:15012. It is the default proxy config's
	// discoveryAddress and the proxy's CA_ADDR.
	XDSAddress string
	// DomainSuffix is the cluster's DNS suffix, default cluster.local.
	DomainSuffix string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Metrics default to an unregistered set.
	Metrics *Metrics
}

const (
	defaultDomainSuffix = "cluster.local"
	systemNamespace     = "istio-system"
)

func (o Options) withDefaults() (Options, error) {
	if o.NamespaceLabels == nil && o.Kube == nil {
		return o, errors.New("inject: Options.NamespaceLabels or Options.Kube is required to read namespace labels")
	}
	if o.DomainSuffix == "" {
		o.DomainSuffix = defaultDomainSuffix
	}
	if o.XDSAddress == "" {
		o.XDSAddress = istiodService(o.Revision) + "." + systemNamespace + ".svc:15012"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return o, nil
}

func istiodService(revision string) string {
	if revision == "" {
		return "istiod"
	}
	return "istiod-" + revision
}
