package grpcgen

import (
	"io"
	"log/slog"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// Type URLs served by this package, in the order gRPC subscribes to them.
const (
	ListenerType = resource.ListenerType
	RouteType    = resource.RouteType
	ClusterType  = resource.ClusterType
	EndpointType = resource.EndpointType
)

// TypeURLs lists the served type URLs in subscription order (LDS, RDS, CDS, EDS).
var TypeURLs = [...]string{ListenerType, RouteType, ClusterType, EndpointType}

// Generator produces the resources of one type URL for one proxy.
type Generator interface {
	Generate(proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error)
}

// Options configure the generators.
type Options struct {
	// Logger receives warnings about configuration gRPC cannot honour
	// (for example a load balancer policy it does not implement). Nil discards.
	Logger *slog.Logger
	// DomainSuffix is the cluster domain used to expand short service names
	// ("echo", "echo.ns") in listener names. Default "cluster.local".
	DomainSuffix string
	// LoadAssignments caches the marshalled load assignments EDS serves.
	// Passing the cache Envoy's generators use makes each assignment
	// marshalled once for both kinds of client; nil makes a private one.
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

// Set holds one generator per type URL. Its generators are safe for
// concurrent use by many connections.
type Set struct {
	Listeners *ListenerGenerator
	Routes    *RouteGenerator
	Clusters  *ClusterGenerator
	Endpoints *EndpointGenerator
}

// New builds the four generators with shared options.
func New(opts Options) *Set {
	return &Set{
		Listeners: NewListenerGenerator(opts),
		Routes:    NewRouteGenerator(opts),
		Clusters:  NewClusterGenerator(opts),
		Endpoints: NewEndpointGenerator(opts),
	}
}

// Generators returns a new set's generators by type URL.
func Generators(opts Options) map[string]Generator { return New(opts).ByTypeURL() }

// ByTypeURL maps each served type URL to its generator.
func (s *Set) ByTypeURL() map[string]Generator {
	return map[string]Generator{
		ListenerType: s.Listeners,
		RouteType:    s.Routes,
		ClusterType:  s.Clusters,
		EndpointType: s.Endpoints,
	}
}
