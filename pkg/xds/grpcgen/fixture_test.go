package grpcgen

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	security "istio.io/api/security/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// fixture is the readable input of a golden test case.
type fixture struct {
	Proxy               fixtureProxy       `json:"proxy"`
	Services            []fixtureService   `json:"services"`
	Endpoints           []fixtureEndpoints `json:"endpoints"`
	DestinationRules    []fixtureConfig    `json:"destinationRules"`
	PeerAuthentications []fixtureConfig    `json:"peerAuthentications"`
	VirtualServices     []fixtureConfig    `json:"virtualServices"`
	Request             fixtureRequest     `json:"request"`
}

type fixtureProxy struct {
	Namespace string            `json:"namespace"`
	IP        string            `json:"ip"`
	Labels    map[string]string `json:"labels"`
}

type fixtureService struct {
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"`
	Ports     []fixturePort `json:"ports"`
	// ExportTo as in the Istio annotation: "*", ".", "~" or namespaces.
	// Omitted means public.
	ExportTo []string `json:"exportTo"`
	// ExternalName makes it an ExternalName Service for that name.
	ExternalName string `json:"externalName"`
}

type fixturePort struct {
	Name     string `json:"name"`
	Port     uint32 `json:"port"`
	Protocol string `json:"protocol"`
}

// fixtureEndpoints are endpoints of one service port that share everything
// but their addresses.
type fixtureEndpoints struct {
	Service   string            `json:"service"` // namespace/name
	PortName  string            `json:"portName"`
	Port      uint32            `json:"port"`
	Addresses []string          `json:"addresses"`
	Labels    map[string]string `json:"labels"`
	Locality  string            `json:"locality"` // region/zone/subzone
	Health    string            `json:"health"`   // HEALTHY (default), UNHEALTHY, DRAINING
	Slice     string            `json:"slice"`
	// ServiceAccount is the pods' (in the service's namespace); it names
	// their workload identity.
	ServiceAccount string `json:"serviceAccount"`
}

type fixtureConfig struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

type fixtureRequest struct {
	Wildcard  bool     `json:"wildcard"`
	Listeners []string `json:"listeners"`
	Routes    []string `json:"routes"`
	Clusters  []string `json:"clusters"`
	Endpoints []string `json:"endpoints"`
}

func loadFixture(t testing.TB, path string) fixture {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// store builds the model store the fixture describes. Destination rules are
// created one second apart in file order, which fixes Istio's merge order.
func (f fixture) store(t testing.TB) model.Store {
	t.Helper()
	store := model.NewStore()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range f.Services {
		svc := &model.Service{
			Name:         s.Name,
			Namespace:    s.Namespace,
			Hostname:     s.Name + "." + s.Namespace + ".svc.cluster.local",
			ExportTo:     exportTo(s.ExportTo, s.Namespace),
			CreationTime: created,
			ExternalName: s.ExternalName,
		}
		for _, p := range s.Ports {
			proto := model.Protocol(p.Protocol)
			if proto == "" {
				proto = model.ProtocolGRPC
			}
			svc.Ports = append(svc.Ports, &model.Port{Name: p.Name, Port: p.Port, Protocol: proto, TargetPort: p.Port})
		}
		store.UpsertService(svc)
	}
	type sliceKey struct {
		svc   model.NamespacedName
		slice string
	}
	slices := map[sliceKey][]*model.Endpoint{}
	var order []sliceKey
	for _, e := range f.Endpoints {
		ns, name, ok := strings.Cut(e.Service, "/")
		if !ok {
			t.Fatalf("endpoint service %q is not namespace/name", e.Service)
		}
		key := sliceKey{model.NamespacedName{Namespace: ns, Name: name}, e.Slice}
		if _, ok := slices[key]; !ok {
			order = append(order, key)
		}
		for _, addr := range e.Addresses {
			slices[key] = append(slices[key], &model.Endpoint{
				Address:         addr,
				Port:            e.Port,
				ServicePortName: e.PortName,
				Labels:          e.Labels,
				Locality:        parseLocality(e.Locality),
				Health:          parseHealth(t, e.Health),
				Namespace:       ns,
				ServiceAccount:  e.ServiceAccount,
			})
		}
	}
	for _, key := range order {
		store.SetEndpoints(key.svc, key.slice, slices[key])
	}
	// Configs are created one second apart, rules first, then
	// PeerAuthentications, then VirtualServices, which fixes Istio's
	// oldest-first order.
	n := 0
	for _, list := range []struct {
		kind    model.Kind
		configs []fixtureConfig
		spec    func() proto.Message
	}{
		{model.KindDestinationRule, f.DestinationRules, func() proto.Message { return &networking.DestinationRule{} }},
		{model.KindPeerAuthentication, f.PeerAuthentications, func() proto.Message { return &security.PeerAuthentication{} }},
		{model.KindVirtualService, f.VirtualServices, func() proto.Message { return &networking.VirtualService{} }},
	} {
		for _, c := range list.configs {
			spec := list.spec()
			if err := protojson.Unmarshal(c.Spec, spec); err != nil {
				t.Fatalf("%s %s: %v", list.kind, c.Metadata.Name, err)
			}
			n++
			store.UpsertConfig(&model.Config{
				Kind:         list.kind,
				Name:         c.Metadata.Name,
				Namespace:    c.Metadata.Namespace,
				Revision:     fmt.Sprint(n),
				CreationTime: created.Add(time.Duration(n-1) * time.Second),
				Spec:         spec,
			})
		}
	}
	return store
}

func (f fixture) proxy() *model.Proxy {
	return &model.Proxy{
		ID:          "sidecar~" + f.Proxy.IP + "~client-0." + f.Proxy.Namespace + "~" + f.Proxy.Namespace + ".svc.cluster.local",
		Type:        model.SidecarProxy,
		IPAddresses: []string{f.Proxy.IP},
		Namespace:   f.Proxy.Namespace,
		DNSDomain:   f.Proxy.Namespace + ".svc.cluster.local",
		Labels:      f.Proxy.Labels,
		Generator:   "grpc",
	}
}

func exportTo(raw []string, ns string) model.ExportTo {
	if raw == nil {
		return nil
	}
	out := model.ExportTo{}
	for _, e := range raw {
		switch e {
		case "~":
		case ".":
			out = append(out, ns)
		default:
			out = append(out, e)
		}
	}
	return out
}

func parseLocality(s string) model.Locality {
	parts := strings.SplitN(s, "/", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return model.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
}

func parseHealth(t testing.TB, s string) model.HealthStatus {
	switch s {
	case "", "HEALTHY":
		return model.Healthy
	case "UNHEALTHY":
		return model.Unhealthy
	case "DRAINING":
		return model.Draining
	}
	t.Fatalf("unknown health %q", s)
	return 0
}

func testPushOptions() pushcontext.Options {
	return pushcontext.Options{DomainSuffix: "cluster.local", RootNamespace: "istio-system"}
}
