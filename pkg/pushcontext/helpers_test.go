package pushcontext

import (
	"slices"
	"strconv"
	"time"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

const testSuffix = "cluster.local"

var testOpts = Options{DomainSuffix: testSuffix, RootNamespace: "istio-system"}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func hostname(ns, name string) string { return name + "." + ns + ".svc." + testSuffix }

// newService makes a service with an http port 80 and a grpc port 9090.
func newService(ns, name string, exportTo model.ExportTo) *model.Service {
	return &model.Service{
		Name:      name,
		Namespace: ns,
		Hostname:  hostname(ns, name),
		Ports: []*model.Port{
			{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080},
			{Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC, TargetPort: 9090},
		},
		ExportTo: exportTo,
	}
}

func newEndpoint(addr, portName string, labels map[string]string) *model.Endpoint {
	port := uint32(8080)
	if portName == "grpc" {
		port = 9090
	}
	return &model.Endpoint{Address: addr, Port: port, ServicePortName: portName, Labels: labels}
}

// ruleConfig wraps a DestinationRule spec; age orders rules (0 is oldest).
func ruleConfig(ns, name string, age int, spec *networking.DestinationRule) *model.Config {
	return &model.Config{
		Kind:         model.KindDestinationRule,
		Name:         name,
		Namespace:    ns,
		CreationTime: epoch.Add(time.Duration(age) * time.Minute),
		Spec:         spec,
	}
}

func subset(name string, labels map[string]string) *networking.Subset {
	return &networking.Subset{Name: name, Labels: labels}
}

func version(v string) map[string]string { return map[string]string{"version": v} }

func addr(i int) string { return "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250+1) }

func key(kind model.Kind, ns, name string) model.ConfigKey {
	return model.ConfigKey{Kind: kind, Namespace: ns, Name: name}
}

func pushRequest(keys ...model.ConfigKey) *model.PushRequest {
	req := &model.PushRequest{Full: true, ConfigsUpdated: map[model.ConfigKey]struct{}{}}
	for _, k := range keys {
		req.ConfigsUpdated[k] = struct{}{}
	}
	return req
}

// fromNames renders a rule's From list, or nil for no rule.
func fromNames(dr *DestinationRule) []string {
	if dr == nil {
		return nil
	}
	out := make([]string, 0, len(dr.From))
	for _, f := range dr.From {
		out = append(out, f.String())
	}
	return out
}

func subsetNames(dr *DestinationRule) []string {
	if dr == nil {
		return nil
	}
	var out []string
	for _, s := range dr.Spec.Subsets {
		out = append(out, s.Name)
	}
	return out
}

func addresses(eps []*model.Endpoint) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.Address)
	}
	return out
}

func hostnames(services []*model.Service) []string {
	out := make([]string, 0, len(services))
	for _, s := range services {
		out = append(out, s.Hostname)
	}
	return out
}

func sortedCopy(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := slices.Clone(in)
	slices.Sort(out)
	return out
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }
