package envoygen

import (
	"io"
	"log/slog"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// Type URLs served by this package.
const (
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
	SecretType   = resource.SecretType
)

// Generator produces the resources of one type URL for one proxy; the xDS
// server's interface has the same method.
type Generator interface {
	Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error)
}

// Options configure the generators.
type Options struct {
	// Logger receives one line per configuration problem that forced a
	// generator to drop part of an object (with the object and the reason).
	Logger *slog.Logger
	// DomainSuffix is the cluster domain, for short host names in routes.
	DomainSuffix string
	// LoadAssignments caches the marshalled load assignments EDS serves.
	// Passing the cache the proxyless gRPC generators use makes each
	// assignment marshalled once for both kinds of client; nil makes a
	// private one.
	LoadAssignments *loadassign.Cache
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.DomainSuffix == "" {
		o.DomainSuffix = "cluster.local"
	}
	if o.LoadAssignments == nil {
		o.LoadAssignments = new(loadassign.Cache)
	}
	return o
}

// Set holds one generator per type URL, safe for concurrent use.
type Set struct {
	Clusters  Generator
	Endpoints Generator
	Listeners Generator
	Routes    Generator
	Secrets   Generator
}

// New builds the generators with shared options.
func New(opts Options) *Set {
	opts = opts.withDefaults()
	return &Set{
		Clusters:  NewClusterGenerator(opts),
		Endpoints: NewEndpointGenerator(opts),
		Listeners: NewListenerGenerator(opts),
		Routes:    NewRouteGenerator(opts),
		Secrets:   NewSecretGenerator(opts),
	}
}

// ByTypeURL maps each served type URL to its generator.
func (s *Set) ByTypeURL() map[string]Generator {
	return map[string]Generator{
		ClusterType:  s.Clusters,
		EndpointType: s.Endpoints,
		ListenerType: s.Listeners,
		RouteType:    s.Routes,
		SecretType:   s.Secrets,
	}
}
