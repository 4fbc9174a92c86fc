package wdsgen

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Type URLs of what node proxies subscribe to.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// Options configure the generators.
type Options struct {
	Logger *slog.Logger
}

// Generators is the set served to node proxies. Its generators are
// pointers, so the server shares one generation between node proxies.
type Generators struct {
	Addresses     *AddressGenerator
	Authorization *AuthorizationGenerator
}

// New returns the node proxy generator set.
func New(opts Options) *Generators {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Generators{
		Addresses:     &AddressGenerator{log: opts.Logger.With("component", "wdsgen")},
		Authorization: &AuthorizationGenerator{},
	}
}

// Generator is what the server calls (xds.Generator, which this package
// may not import).
type Generator interface {
	Generate(*model.Proxy, *pushcontext.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error)
}

// ByTypeURL maps each served type URL to its generator.
func (g *Generators) ByTypeURL() map[string]Generator {
	return map[string]Generator{AddressType: g.Addresses, AuthorizationType: g.Authorization}
}

// AddressGenerator generates istio.workload.Address resources.
type AddressGenerator struct {
	log *slog.Logger

	mu sync.Mutex
	// sets are the address sets of the most recent push contexts, newest
	// last; a few are kept because connections may still be generating
	// from the previous one.
	sets []*addressSet
}

const keptSets = 2

// Generate returns every Address for a wildcard subscription. For names,
// it returns the Addresses they name: a workload's uid or a service's
// "<namespace>/<hostname>" directly, and a "<network>/<ip>" as the
// workloads there (all that share it) or else the service there, each
// under its own name with the address as an alias; for a service, by name
// or VIP, also the workloads behind it (with that name as an alias), which
// the node proxy needs to reach the service. The request does not matter:
// the server sends only what differs from what the client holds.
func (g *AddressGenerator) Generate(_ *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
	set := g.setFor(push)
	if w.Wildcard && len(w.ResourceNames) == 0 {
		return set.items, nil
	}
	var out model.Resources
	at := map[string]int{}
	add := func(name, alias string) {
		i, ok := set.byName[name]
		if !ok {
			return
		}
		j, seen := at[name]
		if !seen {
			j = len(out)
			at[name] = j
			out = append(out, set.items[i])
		}
		if alias != "" && !slices.Contains(out[j].Aliases, alias) {
			// A fresh slice: the item's own is shared by every caller.
			out[j].Aliases = append(slices.Clip(out[j].Aliases), alias)
		}
	}
	if w.Wildcard {
		for _, it := range set.items {
			add(it.Name, "")
		}
	}
	for _, name := range w.ResourceNames {
		if _, ok := set.byName[name]; ok {
			add(name, "")
			// A service asked for by name brings its workloads, as by its
			// VIP: without them a node proxy has nowhere to send it.
			for _, uid := range set.backing[name] {
				add(uid, name)
			}
			continue
		}
		key, ok := addressKey(name)
		if !ok {
			continue
		}
		wls, svc := push.LookupAddress(key)
		switch {
		case len(wls) > 0 || len(set.endpointsAt[key]) > 0:
			// Every workload there (host-network Pods share their node's
			// IP): the node proxy picks the owner, as ztunnel does.
			for _, wl := range wls {
				add(push.WorkloadUID(wl), name)
			}
			for _, uid := range set.endpointsAt[key] {
				add(uid, name)
			}
		case svc != nil:
			add(serviceName(svc), name)
			for _, uid := range set.backing[serviceName(svc)] {
				add(uid, name)
			}
		}
	}
	slices.SortFunc(out, func(a, b model.Resource) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// addressKey parses an on-demand name "<network>/<ip>" into the push
// context's canonical key; false if it is not one.
func addressKey(name string) (string, bool) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", false
	}
	if _, err := netip.ParseAddr(name[i+1:]); err != nil {
		return "", false
	}
	return pushcontext.NetworkAddress(name[:i], name[i+1:]), true
}

// serviceName is a service's resource name, "<namespace>/<hostname>".
func serviceName(svc *model.Service) string {
	return svc.Namespace + "/" + svc.Hostname
}

// AuthorizationGenerator answers istio.security.Authorization. meshpilot
// has no ambient authorization policies yet, so it has no resources; an
// explicit empty answer (rather than "type not served") keeps node proxies
// that wait for it, like ztunnel, in sync without a NACK or a retry.
type AuthorizationGenerator struct{}

// Generate returns no resources.
func (*AuthorizationGenerator) Generate(*model.Proxy, *pushcontext.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
	return model.Resources{}, nil
}
