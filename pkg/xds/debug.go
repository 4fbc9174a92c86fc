package xds

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// DebugHandler serves /debug/syncz, /debug/config_dump?proxyID= and
// /debug/pushcontext, at those full paths.
func (s *Server) DebugHandler() http.Handler {
	mux := http.NewServeMux()
	s.RegisterDebug(mux)
	return mux
}

// RegisterDebug adds the debug endpoints to mux.
func (s *Server) RegisterDebug(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/syncz", s.serveSyncz)
	mux.HandleFunc("GET /debug/config_dump", s.serveConfigDump)
	mux.HandleFunc("GET /debug/pushcontext", s.servePushContext)
}

// SyncStatus is one connection's entry in /debug/syncz.
type SyncStatus struct {
	ProxyID      string       `json:"proxyID"`
	ConnectionID string       `json:"connectionID"`
	Mode         string       `json:"mode"` // sotw or delta
	ConnectedAt  time.Time    `json:"connectedAt"`
	Types        []TypeStatus `json:"types"`
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

// ConfigDump is what one proxy was last sent, per type.
type ConfigDump struct {
	ProxyID      string           `json:"proxyID"`
	ConnectionID string           `json:"connectionID"`
	Mode         string           `json:"mode"`
	Types        []TypeConfigDump `json:"types"`
}

// TypeConfigDump is what one type's responses left on the client.
type TypeConfigDump struct {
	TypeURL   string         `json:"typeURL"`
	Version   string         `json:"version,omitempty"`
	Nonce     string         `json:"nonce,omitempty"`
	Resources []ResourceDump `json:"resources"`
}

// ResourceDump is one resource rendered with protojson. Resource is absent
// when the client announced the resource (delta initial versions) and the
// server never sent it.
type ResourceDump struct {
	Name     string          `json:"name"`
	Version  string          `json:"version"`
	Resource json.RawMessage `json:"resource,omitempty"`
}

// SyncStatus returns the sync state of every connection, sorted by proxy.
func (s *Server) SyncStatus() []SyncStatus {
	conns := s.connections()
	out := make([]SyncStatus, 0, len(conns))
	for _, c := range conns {
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
	st := SyncStatus{ProxyID: c.proxy.ID, ConnectionID: c.id, Mode: c.mode(), ConnectedAt: c.connectedAt,
		Types: make([]TypeStatus, 0, len(c.order))}
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		ts := TypeStatus{
			TypeURL: typeURL, Type: shortType(typeURL),
			SentVersion: w.sentVersion, SentNonce: w.sentNonce,
			AckedVersion: w.ackedVersion, AckedNonce: w.ackedNonce,
			Wildcard: w.resource.Wildcard, Subscribed: len(w.resource.ResourceNames), Resources: len(w.sent),
		}
		if w.nack != nil {
			n := *w.nack
			ts.Nack = &n
		}
		if !w.lastPush.IsZero() {
			t := w.lastPush
			ts.LastPush = &t
		}
		st.Types = append(st.Types, ts)
	}
	return st
}

// ConfigDump returns what the newest connection of proxyID was last sent;
// false when no such proxy is connected.
func (s *Server) ConfigDump(proxyID string) (ConfigDump, bool) {
	var newest *connection
	for _, c := range s.connections() {
		if c.proxy.ID == proxyID && (newest == nil || c.connectedAt.After(newest.connectedAt)) {
			newest = c
		}
	}
	if newest == nil {
		return ConfigDump{}, false
	}
	return newest.configDump(), true
}

func (c *connection) configDump() ConfigDump {
	c.mu.Lock()
	defer c.mu.Unlock()
	dump := ConfigDump{ProxyID: c.proxy.ID, ConnectionID: c.id, Mode: c.mode(), Types: make([]TypeConfigDump, 0, len(c.order))}
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		td := TypeConfigDump{TypeURL: typeURL, Version: w.sentVersion, Nonce: w.sentNonce,
			Resources: make([]ResourceDump, 0, len(w.sent))}
		for name, r := range w.sent {
			td.Resources = append(td.Resources, ResourceDump{Name: name, Version: r.version, Resource: renderAny(r.resource)})
		}
		slices.SortFunc(td.Resources, func(a, b ResourceDump) int { return cmp.Compare(a.Name, b.Name) })
		dump.Types = append(dump.Types, td)
	}
	return dump
}

// renderAny renders a resource as protojson with its private keys
// redacted; a type this binary cannot resolve is shown by its type URL and
// error instead of failing the dump.
func renderAny(a *anypb.Any) json.RawMessage {
	if a == nil {
		return nil
	}
	r, err := redactedCopy(a)
	if err == nil {
		var b []byte
		if b, err = protojson.Marshal(r); err == nil {
			return b
		}
	}
	b, _ := json.Marshal(map[string]string{"@type": a.GetTypeUrl(), "error": err.Error()})
	return b
}

func (s *Server) serveSyncz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.SyncStatus())
}

func (s *Server) serveConfigDump(w http.ResponseWriter, r *http.Request) {
	proxyID := r.URL.Query().Get("proxyID")
	if proxyID == "" {
		http.Error(w, "missing proxyID query parameter (see /debug/syncz for connected proxies)", http.StatusBadRequest)
		return
	}
	dump, ok := s.ConfigDump(proxyID)
	if !ok {
		http.Error(w, "proxy "+proxyID+" is not connected (see /debug/syncz for connected proxies)", http.StatusNotFound)
		return
	}
	writeJSON(w, dump)
}

func (s *Server) servePushContext(w http.ResponseWriter, _ *http.Request) {
	pc := s.PushContext()
	if pc == nil {
		http.Error(w, "no push context yet: the config sources have not synced", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, pc.Summary())
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
