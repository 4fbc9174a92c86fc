package xdstest

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// snapshot is the active configuration: what the client serves, not what
// warms behind it.
func (s *envoyState) snapshot() Snapshot {
	snap := Snapshot{
		Clusters: map[string]*clusterv3.Cluster{}, Endpoints: map[string]*endpointv3.ClusterLoadAssignment{},
		Listeners: map[string]*listenerv3.Listener{}, Routes: map[string]*routev3.RouteConfiguration{},
		Secrets: map[string]*tlsv3.Secret{},
	}
	for name, e := range s.clusters {
		if e.active == nil {
			continue
		}
		snap.Clusters[name] = e.active.res.(*clusterv3.Cluster)
		if e.active.eds != nil && e.active.eds.cla != nil {
			snap.Endpoints[name] = e.active.eds.cla
		}
	}
	for name, e := range s.listeners {
		if e.active != nil {
			snap.Listeners[name] = e.active.res.(*listenerv3.Listener)
		}
	}
	for k, sub := range s.subs {
		switch v := sub.value.(type) {
		case *routev3.RouteConfiguration:
			snap.Routes[k.name] = v
		case *tlsv3.Secret:
			snap.Secrets[k.name] = v
		}
	}
	return snap
}

// warming is what waits on the server now: an initial fetch still
// unanswered, or a cluster or listener waiting for what it depends on.
func (s *envoyState) warming() []Warming {
	var out []Warming
	for _, t := range []struct {
		url   string
		since time.Time
	}{{resourcev3.ClusterType, s.begun}, {resourcev3.ListenerType, s.ldsSince}} {
		if ts := s.types[t.url]; ts != nil && !ts.responded {
			out = append(out, Warming{Type: shortType(t.url), Name: "(initial fetch)", Since: t.since,
				WaitingFor: []string{"the first " + shortType(t.url) + " response"}})
		}
	}
	for _, inst := range append(s.instances(s.clusters), s.instances(s.listeners)...) {
		if inst.ready() { // active instances are always ready
			continue
		}
		w := Warming{Type: inst.kind, Name: inst.name, Since: inst.since}
		if inst.eds != nil && !inst.eds.done {
			w.WaitingFor = append(w.WaitingFor, shortType(inst.eds.typeURL)+" "+inst.eds.name)
		}
		for _, sub := range inst.deps {
			if !sub.done {
				w.WaitingFor = append(w.WaitingFor, shortType(sub.typeURL)+" "+sub.name)
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		return cmp.Or(out[i].Since.Compare(out[j].Since), cmp.Compare(out[i].Name, out[j].Name)) < 0
	})
	return out
}

// dangling describes each reference of the active configuration that
// resolves to nothing.
func (s *envoyState) dangling() []string {
	var out []string
	missing := func(owner string, sub *sharedSub) {
		if sub.value == nil {
			out = append(out, fmt.Sprintf("%s: %s %s was never received", owner, shortType(sub.typeURL), sub.name))
		}
	}
	checkClusters := func(owner string, names []string) {
		for _, c := range names {
			if e := s.clusters[c]; e == nil || e.active == nil {
				out = append(out, fmt.Sprintf("%s: cluster %s is not an active cluster", owner, c))
			}
		}
	}
	routes := map[string]*routev3.RouteConfiguration{}
	for name, e := range s.clusters {
		if inst := e.active; inst != nil {
			if inst.eds != nil && inst.eds.cla == nil {
				out = append(out, fmt.Sprintf("Cluster %s: active without ClusterLoadAssignment %s", name, inst.eds.name))
			}
			for _, sub := range inst.deps {
				missing("Cluster "+name, sub)
			}
		}
	}
	for name, e := range s.listeners {
		inst := e.active
		if inst == nil {
			continue
		}
		for _, sub := range inst.deps {
			missing("Listener "+name, sub)
			if rc, ok := sub.value.(*routev3.RouteConfiguration); ok {
				routes[sub.name] = rc
			}
		}
		checkClusters("Listener "+name, inst.clusters)
	}
	for name, rc := range routes {
		_, clusters := referencesOf(rc)
		checkClusters("RouteConfiguration "+name, clusters)
	}
	slices.Sort(out)
	return out
}

// settled is nil when the client is fully warm, nothing dangles and cond
// (if any) holds; otherwise it says what is missing.
func (s *envoyState) settled(cond func(Snapshot) error) error {
	var problems []string
	for _, w := range s.warming() {
		problems = append(problems, w.String())
	}
	problems = append(problems, s.dangling()...)
	if len(problems) == 0 && cond != nil {
		if err := cond(s.snapshot()); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("not settled:\n  %s", strings.Join(problems, "\n  "))
}

func shortType(typeURL string) string {
	switch typeURL {
	case resourcev3.ClusterType:
		return "CDS"
	case resourcev3.ListenerType:
		return "LDS"
	case resourcev3.EndpointType:
		return "ClusterLoadAssignment"
	case resourcev3.RouteType:
		return "RouteConfiguration"
	case resourcev3.SecretType:
		return "Secret"
	}
	return typeURL
}
