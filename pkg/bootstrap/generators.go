package bootstrap

import (
	"log/slog"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/xds"
	"github.com/meshpilot/meshpilot/pkg/xds/envoygen"
	"github.com/meshpilot/meshpilot/pkg/xds/grpcgen"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
	"github.com/meshpilot/meshpilot/pkg/xds/wdsgen"
)

// generatorSets holds one generator set per kind of client. The sets are
// built once and handed to every proxy of their kind: the server shares
// generations between identical proxies only when their generators are the
// same instances.
type generatorSets struct {
	grpc  map[string]xds.Generator
	envoy map[string]xds.Generator
	// node serves node proxies (ztunnel): workload discovery only.
	node map[string]xds.Generator
}

// GeneratorGRPC is the node metadata GENERATOR value of proxyless gRPC
// clients, as Istio's bootstrap for them sets it.
const GeneratorGRPC = "grpc"

func newGeneratorSets(log *slog.Logger, domainSuffix string) *generatorSets {
	// One load assignment cache for both kinds of client, so each
	// assignment is marshalled once.
	assignments := new(loadassign.Cache)
	grpcSet := grpcgen.New(grpcgen.Options{Logger: log, DomainSuffix: domainSuffix, LoadAssignments: assignments})
	envoySet := envoygen.New(envoygen.Options{Logger: log, DomainSuffix: domainSuffix, LoadAssignments: assignments})
	sets := &generatorSets{grpc: map[string]xds.Generator{}, envoy: map[string]xds.Generator{}, node: map[string]xds.Generator{}}
	for typeURL, g := range wdsgen.New(wdsgen.Options{Logger: log}).ByTypeURL() {
		sets.node[typeURL] = g
	}
	for typeURL, g := range grpcSet.ByTypeURL() {
		sets.grpc[typeURL] = g
	}
	for typeURL, g := range envoySet.ByTypeURL() {
		sets.envoy[typeURL] = g
	}
	return sets
}

// forProxy picks the set by the node type (node proxies), then by what the
// client asked for in its node metadata: proxyless gRPC, or Envoy (sidecars
// and routers) by default.
func (g *generatorSets) forProxy(p *model.Proxy) map[string]xds.Generator {
	if p.Type == model.NodeProxy {
		return g.node
	}
	if p.Generator == GeneratorGRPC {
		return g.grpc
	}
	return g.envoy
}

// addDebug serves Istio's debug syncz type to every kind of client: to
// istioctl, whose node looks like a sidecar's, and to any proxy that asks.
func (g *generatorSets) addDebug(syncz xds.Generator) {
	for _, set := range []map[string]xds.Generator{g.grpc, g.envoy, g.node} {
		set[xds.DebugSyncType] = syncz
	}
}
