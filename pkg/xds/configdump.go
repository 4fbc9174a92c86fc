package xds

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// EnvoyConfigDump returns what a connection of proxyID was last sent, as
// Envoy's admin /config_dump shows what it holds: an
// envoy.admin.v3.ConfigDump with the clusters, listeners, routes and
// secrets (and, with includeEDS, endpoints) as dynamic resources, in
// Envoy's order, so that `istioctl proxy-config ... -f` and scripts written
// for Envoy read it. Every private key is redacted.
//
// connectionID picks one of several connections with the same node ID; ""
// takes the newest. found is false when no such connection exists. Types
// that have no place in Envoy's dump (WDS, Istio's debug types) are left
// out: the meshpilot dump (ConfigDump) shows them.
func (s *Server) EnvoyConfigDump(proxyID, connectionID string, includeEDS bool) (dump *adminv3.ConfigDump, found bool, err error) {
	c := s.findConnection(proxyID, connectionID)
	if c == nil {
		return nil, false, nil
	}
	dump, err = c.envoyConfigDump(includeEDS)
	return dump, true, err
}

// findConnection returns the connection of proxyID named connectionID, or
// the newest one of proxyID when connectionID is "".
func (s *Server) findConnection(proxyID, connectionID string) *connection {
	var found *connection
	for _, c := range s.connections() {
		if c.proxy.ID != proxyID || (connectionID != "" && c.id != connectionID) {
			continue
		}
		if found == nil || c.connectedAt.After(found.connectedAt) {
			found = c
		}
	}
	return found
}

// sentCopy is one resource of a watch, copied out under the lock.
type sentCopy struct {
	name, version string
	resource      *anypb.Any
}

// watchCopy is what the dump needs of one watch.
type watchCopy struct {
	version  string
	lastPush time.Time
	sent     []sentCopy
}

// snapshot copies the watched types' sent resources, sorted by name, so
// that redaction and marshalling run without holding c.mu.
func (c *connection) snapshot() map[string]watchCopy {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]watchCopy, len(c.watches))
	for typeURL, w := range c.watches {
		wc := watchCopy{version: w.sentVersion, lastPush: w.lastPush, sent: make([]sentCopy, 0, w.sent.len())}
		for name, r := range w.sent.all() {
			if r.resource == nil {
				// Announced by a delta client, never sent: Envoy would
				// not show it either until it arrives.
				continue
			}
			wc.sent = append(wc.sent, sentCopy{name: name, version: r.version, resource: r.resource})
		}
		slices.SortFunc(wc.sent, func(a, b sentCopy) int { return cmp.Compare(a.name, b.name) })
		out[typeURL] = wc
	}
	return out
}

func (c *connection) envoyConfigDump(includeEDS bool) (*adminv3.ConfigDump, error) {
	watches := c.snapshot()
	dump := &adminv3.ConfigDump{}
	// Envoy's order: clusters, listeners, routes, secrets, then endpoints.
	// A per-resource version is the content hash the server keeps; a
	// per-resource last_updated is the time of the type's last response,
	// which is when the client last received it whole.
	add := func(m proto.Message) error {
		a, err := anypb.New(m)
		if err != nil {
			return err
		}
		dump.Configs = append(dump.Configs, a)
		return nil
	}
	if w, ok := watches[ClusterType]; ok {
		d := &adminv3.ClustersConfigDump{VersionInfo: w.version}
		for _, r := range w.sent {
			a, err := redactedForDump(r)
			if err != nil {
				return nil, err
			}
			d.DynamicActiveClusters = append(d.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{
				VersionInfo: r.version, Cluster: a, LastUpdated: timestamp(w.lastPush)})
		}
		if err := add(d); err != nil {
			return nil, err
		}
	}
	if w, ok := watches[ListenerType]; ok {
		d := &adminv3.ListenersConfigDump{VersionInfo: w.version}
		for _, r := range w.sent {
			a, err := redactedForDump(r)
			if err != nil {
				return nil, err
			}
			d.DynamicListeners = append(d.DynamicListeners, &adminv3.ListenersConfigDump_DynamicListener{
				Name: r.name,
				ActiveState: &adminv3.ListenersConfigDump_DynamicListenerState{
					VersionInfo: r.version, Listener: a, LastUpdated: timestamp(w.lastPush)},
			})
		}
		if err := add(d); err != nil {
			return nil, err
		}
	}
	if w, ok := watches[RouteType]; ok {
		d := &adminv3.RoutesConfigDump{}
		for _, r := range w.sent {
			a, err := redactedForDump(r)
			if err != nil {
				return nil, err
			}
			d.DynamicRouteConfigs = append(d.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{
				VersionInfo: r.version, RouteConfig: a, LastUpdated: timestamp(w.lastPush)})
		}
		if err := add(d); err != nil {
			return nil, err
		}
	}
	if w, ok := watches[SecretType]; ok {
		d := &adminv3.SecretsConfigDump{}
		for _, r := range w.sent {
			a, err := redactedForDump(r)
			if err != nil {
				return nil, err
			}
			d.DynamicActiveSecrets = append(d.DynamicActiveSecrets, &adminv3.SecretsConfigDump_DynamicSecret{
				Name: r.name, VersionInfo: r.version, Secret: a, LastUpdated: timestamp(w.lastPush)})
		}
		if err := add(d); err != nil {
			return nil, err
		}
	}
	if w, ok := watches[EndpointType]; ok && includeEDS {
		d := &adminv3.EndpointsConfigDump{}
		for _, r := range w.sent {
			a, err := redactedForDump(r)
			if err != nil {
				return nil, err
			}
			d.DynamicEndpointConfigs = append(d.DynamicEndpointConfigs, &adminv3.EndpointsConfigDump_DynamicEndpointConfig{
				VersionInfo: r.version, EndpointConfig: a, LastUpdated: timestamp(w.lastPush)})
		}
		if err := add(d); err != nil {
			return nil, err
		}
	}
	return dump, nil
}

// redactedForDump is r with its private keys blanked. A resource that
// cannot be inspected fails the whole dump: showing it unredacted could
// show a key.
func redactedForDump(r sentCopy) (*anypb.Any, error) {
	a, err := redactedCopy(r.resource)
	if err != nil {
		return nil, fmt.Errorf("resource %q (%s) cannot be redacted, so it is not shown: %w", r.name, r.resource.GetTypeUrl(), err)
	}
	return a, nil
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
