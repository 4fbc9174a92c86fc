package grpcgen

import (
	"log/slog"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// dropReporter reports a DestinationRule field that proxyless gRPC clients
// do not get, as the Envoy generators report theirs: listed once per push
// context under translationProblems, counted, and logged the first time
// only, however many namespaces, clusters and cache misses meet it.
type dropReporter struct {
	push   *pushcontext.PushContext
	logger *slog.Logger
	rule   *pushcontext.DestinationRule
	// resource is the cluster or route the field was left out of; it is
	// logged, but not part of the problem, so that one rule's field is one
	// problem.
	resource string
}

// field reports that field (a path in the rule) was dropped, and why. The
// reason must not name a proxy or namespace, or it would repeat per proxy.
func (r dropReporter) field(field, reason string) {
	if r.push == nil || r.rule == nil || len(r.rule.From) == 0 {
		return
	}
	from := r.rule.From[0]
	key := model.ConfigKey{Kind: model.KindDestinationRule, Namespace: from.Namespace, Name: from.Name}
	if r.push.ReportProblem(key, "proxyless gRPC: "+field+": "+reason) {
		r.logger.Warn("DestinationRule field not translated for proxyless gRPC; the rest of the rule still applies",
			"destinationRule", from.String(), "field", field, "reason", reason,
			"resource", r.resource, "mergedFrom", len(r.rule.From))
	}
}
