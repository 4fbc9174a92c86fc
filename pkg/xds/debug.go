package xds

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// DebugHandler serves /debug/syncz, /debug/config_dump?proxyID= and
// /debug/pushcontext, at those full paths. They hold no secret (private
// keys are redacted), so the control plane serves them on its debug port
// and, as istiod does, on its monitoring port.
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

// ConfigDump is meshpilot's own view of what one connection was last sent,
// per type URL, with versions and nonces: /debug/config_dump?format=meshpilot.
// Unlike Envoy's ConfigDump it has every type, node proxies' WDS included.
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

// ConfigDump returns meshpilot's view of what a connection of proxyID was
// last sent (connectionID "" takes the newest); false when no such
// connection exists.
func (s *Server) ConfigDump(proxyID, connectionID string) (ConfigDump, bool) {
	c := s.findConnection(proxyID, connectionID)
	if c == nil {
		return ConfigDump{}, false
	}
	return c.configDump(), true
}

func (c *connection) configDump() ConfigDump {
	c.mu.Lock()
	defer c.mu.Unlock()
	dump := ConfigDump{ProxyID: c.proxy.ID, ConnectionID: c.id, Mode: c.mode(), Types: make([]TypeConfigDump, 0, len(c.order))}
	for _, typeURL := range c.order {
		w := c.watches[typeURL]
		td := TypeConfigDump{TypeURL: typeURL, Version: w.sentVersion, Nonce: w.sentNonce,
			Resources: make([]ResourceDump, 0, w.sent.len())}
		for name, r := range w.sent.all() {
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

// serveConfigDump answers with Envoy's ConfigDump JSON by default, and with
// meshpilot's per-type view for format=meshpilot. include_eds=true adds the
// endpoints, as on Envoy's admin port and istiod's debug port.
func (s *Server) serveConfigDump(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	proxyID, connectionID := q.Get("proxyID"), q.Get("connectionID")
	if proxyID == "" {
		http.Error(w, "missing proxyID query parameter (see /debug/syncz for connected proxies)", http.StatusBadRequest)
		return
	}
	notFound := func() {
		what := "proxy " + proxyID
		if connectionID != "" {
			what += " connection " + connectionID
		}
		http.Error(w, what+" is not connected (see /debug/syncz for connected proxies)", http.StatusNotFound)
	}
	switch q.Get("format") {
	case "meshpilot":
		dump, ok := s.ConfigDump(proxyID, connectionID)
		if !ok {
			notFound()
			return
		}
		writeJSON(w, dump)
	case "", "envoy":
		dump, ok, err := s.EnvoyConfigDump(proxyID, connectionID, q.Get("include_eds") == "true")
		switch {
		case !ok:
			notFound()
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			writeProtoJSON(w, dump)
		}
	default:
		http.Error(w, "format must be envoy (the default) or meshpilot", http.StatusBadRequest)
	}
}

func (s *Server) servePushContext(w http.ResponseWriter, _ *http.Request) {
	pc := s.PushContext()
	if pc == nil {
		http.Error(w, "no push context yet: the config sources have not synced", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, pc.Summary())
}

// writeProtoJSON writes m as Envoy's admin port does: protojson with the
// proto field names, every Any expanded with its @type.
func writeProtoJSON(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, Resolver: lenientResolver{}}.Marshal(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
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

// lenientResolver resolves the types this binary links, and shows any other
// as an empty message under its own @type: redaction has already dropped
// the bytes of such an Any (it cannot look inside), and one extension this
// binary does not know must not hide a proxy's whole dump.
type lenientResolver struct{}

func (lenientResolver) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	return protoregistry.GlobalTypes.FindMessageByName(name)
}

func (lenientResolver) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if errors.Is(err, protoregistry.NotFound) {
		return (&emptypb.Empty{}).ProtoReflect().Type(), nil
	}
	return mt, err
}

func (lenientResolver) FindExtensionByName(field protoreflect.FullName) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByName(field)
}

func (lenientResolver) FindExtensionByNumber(message protoreflect.FullName, field protoreflect.FieldNumber) (protoreflect.ExtensionType, error) {
	return protoregistry.GlobalTypes.FindExtensionByNumber(message, field)
}
