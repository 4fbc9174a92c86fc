package xds

import (
	"cmp"
	"slices"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ExtensionConfigType is ECDS, which Istio's syncz reports on its own line
// (extensionconfig_sent/acked); meshpilot serves no ECDS, so it stays empty
// unless a generator set adds it.
const ExtensionConfigType = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"

// SyncStatus is one connection's entry in /debug/syncz. The first fields are
// istiod's, with its JSON names and meanings (the *_sent and *_acked values
// are nonces), so that scripts written against istiod read it unchanged.
// The rest are meshpilot's: the connection, and every watched type with
// versions and the last NACK. Every connection is listed, also when several
// share one node ID (a restarted proxy whose old stream has not ended yet).
type SyncStatus struct {
	ClusterID            string                    `json:"cluster_id,omitempty"`
	ProxyID              string                    `json:"proxy"`
	ProxyType            string                    `json:"proxy_type,omitempty"`
	ProxyVersion         string                    `json:"proxy_version,omitempty"`
	IstioVersion         string                    `json:"istio_version,omitempty"`
	ClusterSent          string                    `json:"cluster_sent,omitempty"`
	ClusterAcked         string                    `json:"cluster_acked,omitempty"`
	ListenerSent         string                    `json:"listener_sent,omitempty"`
	ListenerAcked        string                    `json:"listener_acked,omitempty"`
	RouteSent            string                    `json:"route_sent,omitempty"`
	RouteAcked           string                    `json:"route_acked,omitempty"`
	EndpointSent         string                    `json:"endpoint_sent,omitempty"`
	EndpointAcked        string                    `json:"endpoint_acked,omitempty"`
	ExtensionConfigSent  string                    `json:"extensionconfig_sent,omitempty"`
	ExtensionConfigAcked string                    `json:"extensionconfig_acked,omitempty"`
	Resources            map[string]ResourceStatus `json:"resources,omitempty"`

	ConnectionID string       `json:"connection_id"`
	Namespace    string       `json:"namespace"`
	Mode         string       `json:"mode"` // sotw or delta
	ConnectedAt  time.Time    `json:"connected_at"`
	Types        []TypeStatus `json:"types"`
}

// ResourceStatus is istiod's per-type entry of /debug/syncz: nonces, the
// time of the last send, and the last rejection's message.
type ResourceStatus struct {
	Sent      string    `json:"sent,omitempty"`
	Acked     string    `json:"acked,omitempty"`
	SentTime  time.Time `json:"sentTime,omitzero"`
	LastError string    `json:"lastError,omitempty"`
}

// TypeStatus is the sync state of one type URL on one connection.
type TypeStatus struct {
	TypeURL      string      `json:"typeURL"`
	Type         string      `json:"type"`
	SentVersion  string      `json:"sentVersion,omitempty"`
	SentNonce    string      `json:"sentNonce,omitempty"`
	AckedVersion string      `json:"ackedVersion,omitempty"`
	AckedNonce   string      `json:"ackedNonce,omitempty"`
	Nack         *NackRecord `json:"nack,omitempty"`
	LastPush     *time.Time  `json:"lastPush,omitempty"`
	Wildcard     bool        `json:"wildcard"`
	Subscribed   int         `json:"subscribedNames"`
	Resources    int         `json:"resourcesSent"`
}

// SyncStatus returns the sync state of every connection, sorted by proxy
// and then connection.
func (s *Server) SyncStatus() []SyncStatus {
	conns := s.connections()
	out := make([]SyncStatus, 0, len(conns))
	for _, c := range conns {
		if c.proxy == nil {
			continue
		}
		out = append(out, c.syncStatus())
	}
	slices.SortFunc(out, func(a, b SyncStatus) int {
		return cmp.Or(cmp.Compare(a.ProxyID, b.ProxyID), cmp.Compare(a.ConnectionID, b.ConnectionID))
	})
	return out
}

func (c *connection) syncStatus() SyncStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proxy
	st := SyncStatus{
		ClusterID: p.ClusterID, ProxyID: p.ID, ProxyType: string(p.Type),
		ProxyVersion: p.IstioVersion, IstioVersion: p.IstioVersion,
		ConnectionID: c.id, Namespace: p.Namespace, Mode: c.mode(), ConnectedAt: c.connectedAt,
		Resources: make(map[string]ResourceStatus, len(c.order)),
		Types:     make([]TypeStatus, 0, len(c.order)),
	}
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		ts := TypeStatus{
			TypeURL: typeURL, Type: shortType(typeURL),
			SentVersion: w.sentVersion, SentNonce: w.sentNonce,
			AckedVersion: w.ackedVersion, AckedNonce: w.ackedNonce,
			Wildcard: w.resource.Wildcard, Subscribed: len(w.resource.ResourceNames), Resources: w.sent.len(),
		}
		rs := ResourceStatus{Sent: w.sentNonce, Acked: w.ackedNonce, SentTime: w.lastPush}
		if w.nack != nil {
			n := *w.nack
			ts.Nack = &n
			if w.nack.Nonce == w.sentNonce {
				rs.LastError = w.nack.Error
			}
		}
		if !w.lastPush.IsZero() {
			t := w.lastPush
			ts.LastPush = &t
		}
		st.Types = append(st.Types, ts)
		st.Resources[typeURL] = rs
		switch typeURL {
		case ClusterType:
			st.ClusterSent, st.ClusterAcked = w.sentNonce, w.ackedNonce
		case ListenerType:
			st.ListenerSent, st.ListenerAcked = w.sentNonce, w.ackedNonce
		case RouteType:
			st.RouteSent, st.RouteAcked = w.sentNonce, w.ackedNonce
		case EndpointType:
			st.EndpointSent, st.EndpointAcked = w.sentNonce, w.ackedNonce
		case ExtensionConfigType:
			st.ExtensionConfigSent, st.ExtensionConfigAcked = w.sentNonce, w.ackedNonce
		}
	}
	return st
}

// configStatus is the CSDS status of one watch, as istiod reports it: the
// client rejected the newest response (ERROR), has not been sent one
// (NOT_SENT), has ACKed it (SYNCED), or has not answered yet (STALE).
// Callers hold c.mu.
func (w *watch) configStatus() statusv3.ConfigStatus {
	switch {
	case w.nack != nil && w.nack.Nonce == w.sentNonce:
		return statusv3.ConfigStatus_ERROR
	case w.sentNonce == "":
		return statusv3.ConfigStatus_NOT_SENT
	case w.ackedNonce == w.sentNonce:
		return statusv3.ConfigStatus_SYNCED
	}
	return statusv3.ConfigStatus_STALE
}

// debugOnly reports whether the connection watches nothing but Istio's
// debug types: it is a tool such as istioctl, not a proxy, and istiod
// leaves such connections out of its CSDS answer. Callers hold c.mu.
func (c *connection) debugOnly() bool {
	for _, typeURL := range c.order {
		if !strings.HasPrefix(typeURL, DebugTypePrefix) {
			return false
		}
	}
	return len(c.order) > 0
}

// clientConfig is the connection's sync state as a CSDS ClientConfig, the
// shape of istiod's answer to istio.io/debug/syncz: the node with the
// metadata istioctl reads (CLUSTER_ID, NAMESPACE, ISTIO_VERSION), and one
// entry per watched type. ok is false for tool connections.
func (c *connection) clientConfig() (cfg *statusv3.ClientConfig, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.debugOnly() {
		return nil, false
	}
	p := c.proxy
	meta := map[string]*structpb.Value{
		"CLUSTER_ID":    structpb.NewStringValue(p.ClusterID),
		"NAMESPACE":     structpb.NewStringValue(p.Namespace),
		"ISTIO_VERSION": structpb.NewStringValue(p.IstioVersion),
	}
	cfg = &statusv3.ClientConfig{Node: &corev3.Node{Id: p.ID, Metadata: &structpb.Struct{Fields: meta}}}
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		x := &statusv3.ClientConfig_GenericXdsConfig{
			TypeUrl:      typeURL,
			VersionInfo:  w.sentVersion,
			ConfigStatus: w.configStatus(),
		}
		if !w.lastPush.IsZero() {
			x.LastUpdated = timestamppb.New(w.lastPush)
		}
		if x.ConfigStatus == statusv3.ConfigStatus_ERROR {
			x.ErrorState = &adminv3.UpdateFailureState{
				LastUpdateAttempt: timestamppb.New(w.nack.Time),
				Details:           w.nack.Error,
				VersionInfo:       w.nack.Version,
			}
		}
		cfg.GenericXdsConfigs = append(cfg.GenericXdsConfigs, x)
	}
	slices.SortFunc(cfg.GenericXdsConfigs, func(a, b *statusv3.ClientConfig_GenericXdsConfig) int {
		return cmp.Compare(a.TypeUrl, b.TypeUrl)
	})
	return cfg, true
}
