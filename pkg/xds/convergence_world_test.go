package xds

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// The convergence test's world: a few namespaces, a fixed set of object
// slots (Service a in apps, the DestinationRule named after it, one of its
// two EndpointSlices, ...), and random steps that each give one slot a
// random new state, "absent" included. The slots are few, so that steps
// often hit an object again and undo or redo an earlier step's effect; the
// states come from small sets of values, so that a return to an earlier
// state is common too.
//
// Every draw is made when the steps are made, never when they are applied:
// a seed names one list of steps.

const (
	convApps = "apps"
	convWeb  = "web"
	convRoot = "istio-system"
)

// convService is a Service slot.
type convService struct {
	ns, name string
	index    int // tells addresses apart
}

func (s convService) host() string { return s.name + "." + s.ns + ".svc.cluster.local" }

func (s convService) key() model.NamespacedName {
	return model.NamespacedName{Namespace: s.ns, Name: s.name}
}

// Two per namespace: few enough that a step often lands on an object an
// earlier step changed, or one a rule or route of the other namespace names.
var convServices = []convService{
	{convApps, "a", 1}, {convApps, "b", 2},
	{convWeb, "d", 4}, {convWeb, "e", 5},
}

// convPortSets are the port lists a Service may have. Endpoints pick their
// port among every name and target here, so some serve a port their
// Service does not have (yet, or any more), as while a rollout is half done.
// The single ports differ in number, which a route to the Service without
// a port names its cluster by.
var convPortSets = [][]*model.Port{
	{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}},
	{{Name: "http", Port: 8000, Protocol: model.ProtocolHTTP, TargetPort: 8080}},
	{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}, {Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC, TargetPort: 9090}},
	{{Name: "tcp", Port: 3306, Protocol: model.ProtocolTCP, TargetPort: 3306}},
	{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8081}},
	{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}, {Name: "tcp", Port: 3306, Protocol: model.ProtocolTCP, TargetPort: 3306}},
}

var convEndpointPorts = []struct {
	name string
	port uint32
}{{"http", 8080}, {"http", 8081}, {"grpc", 9090}, {"tcp", 3306}}

// convClientIPs are the addresses of the client Pods, one per namespace:
// every sidecar client of a namespace claims it, so that a fresh client is
// the same workload as the long-lived ones.
var convClientIPs = map[string]string{convApps: "10.0.0.9", convWeb: "10.0.1.9"}

// convStep is one change of the store, or a break of a long-lived client's
// stream, and the pause before it.
type convStep struct {
	pause time.Duration
	desc  string
	apply func(model.Store)
	// stream, in a step that changes no object (apply is nil), closes or
	// reopens the stream of one of the long-lived clients (see
	// convStreamBreaks).
	stream func(long []*convPair)
	// checkpoint: once the step is pushed, the long-lived clients are
	// compared with fresh ones.
	checkpoint bool
}

func (s convStep) String() string {
	if s.pause == 0 {
		return s.desc
	}
	return fmt.Sprintf("(after %v) %s", s.pause, s.desc)
}

// convGenerators draw one step of each kind of change; weight is how often
// the kind is drawn. Endpoints change most in a real mesh, then rules. A
// push regenerates whole types: a change of a Service, of the gateway
// Service or of a client's own Pod pushes everything to the proxies it
// concerns, and one of a rule or PeerAuthentication all of their clusters,
// which makes good any push that missed something before it; those are
// drawn less often, so that what a push misses lasts until a checkpoint.
var convGenerators = []struct {
	weight int
	gen    func(*rand.Rand) convStep
}{
	{10, convServiceStep},
	{30, convEndpointsStep},
	{18, convRuleStep},
	{10, convVirtualServiceStep},
	{5, convPeerAuthnStep},
	{4, convNamespaceStep},
	{3, convWorkloadStep},
	{6, convBackendPodStep},
	{5, convIngressStep},
	{4, convSecretStep},
	{1, convGatewayServiceStep},
}

// convSteps draws n steps. With pauses, about half the steps wait up to a
// little over the debounce before they apply, so that pushes split the
// sequence at random places; the others land in the same window as the
// step before. The world the server starts with is drawn without pauses.
func convSteps(r *rand.Rand, n int, debounce time.Duration, pauses bool) []convStep {
	total := 0
	for _, g := range convGenerators {
		total += g.weight
	}
	steps := make([]convStep, 0, n)
	for range n {
		pick := r.IntN(total)
		var step convStep
		for _, g := range convGenerators {
			if pick < g.weight {
				step = g.gen(r)
				break
			}
			pick -= g.weight
		}
		if pauses {
			step.pause = convPause(r, debounce)
		}
		steps = append(steps, step)
	}
	return steps
}

// convPause is half the time no pause, else one of up to a little over the
// debounce.
func convPause(r *rand.Rand, debounce time.Duration) time.Duration {
	if r.IntN(2) == 0 {
		return time.Duration(r.Int64N(int64(debounce*3/2) + 1))
	}
	return 0
}

func oneOf[T any](r *rand.Rand, from ...T) T { return from[r.IntN(len(from))] }

// chance is true once in n draws.
func chance(r *rand.Rand, n int) bool { return r.IntN(n) == 0 }

func convServiceStep(r *rand.Rand) convStep {
	s := oneOf(r, convServices...)
	if chance(r, 5) {
		return convStep{desc: "delete Service " + s.key().String(), apply: func(st model.Store) { st.DeleteService(s.key()) }}
	}
	svc := &model.Service{Name: s.name, Namespace: s.ns, Hostname: s.host(),
		ClusterIPs: []string{fmt.Sprintf("10.96.0.%d", s.index)}, Ports: oneOf(r, convPortSets...),
		ExportTo: oneOf(r, nil, model.ExportTo{s.ns}, model.ExportTo{convApps, convWeb}, model.ExportTo{s.ns, convRoot})}
	switch r.IntN(4) {
	case 0:
		// The client Pods serve it: their sidecars get inbound listeners.
		svc.Selector = map[string]string{"app": "client"}
	case 1:
		// Its backend Pods (convBackendPodStep): workload discovery lists
		// the Service among theirs by the selector, not by the slices.
		svc.Selector = map[string]string{"app": s.name}
	}
	if chance(r, 8) {
		// An alias of another slot's Service, or a name outside the mesh.
		svc.ExternalName, svc.ClusterIPs = oneOf(r, oneOf(r, convServices...).host(), "ext.example.com"), nil
	}
	var ports []string
	for _, p := range svc.Ports {
		ports = append(ports, fmt.Sprintf("%s:%d->%d", p.Name, p.Port, p.TargetPort))
	}
	desc := fmt.Sprintf("Service %s ports=%v exportTo=%v selector=%v", s.key(), ports, svc.ExportTo, svc.Selector)
	if svc.ExternalName != "" {
		desc += " externalName=" + svc.ExternalName
	}
	return convStep{desc: desc, apply: func(st model.Store) { st.UpsertService(svc) }}
}

// convEndpointsStep replaces one of a service's two slices with up to three
// endpoints, each with or without a sidecar (the mTLS label and mark).
func convEndpointsStep(r *rand.Rand) convStep {
	s := oneOf(r, convServices...)
	slice := fmt.Sprintf("%s-%d", s.name, r.IntN(2))
	var eps []*model.Endpoint
	descs := []string{}
	for range r.IntN(4) {
		port := oneOf(r, convEndpointPorts...)
		ep := &model.Endpoint{
			Address: fmt.Sprintf("10.1.%d.%d", s.index, 1+r.IntN(4)), Port: port.port, ServicePortName: port.name,
			Namespace: s.ns, Health: oneOf(r, model.Healthy, model.Healthy, model.Healthy, model.Unhealthy, model.Draining),
			// Mostly the service's own identity: a new one makes the
			// endpoint push a full one, which would hide what an
			// endpoint push alone misses.
			ServiceAccount: oneOf(r, s.name, s.name, s.name, s.name, s.name+"-v2", ""),
			Locality:       oneOf(r, model.Locality{Region: "r1", Zone: "z1"}, model.Locality{Region: "r2", Zone: "z2"}),
			Labels:         map[string]string{"app": s.name, "version": oneOf(r, "v1", "v2")},
			// Most name their backend Pod, which may or may not exist
			// (convBackendPodStep); the others are workloads of their
			// own for node proxies, as hand-written slices are.
			FromPod: !chance(r, 4),
		}
		if chance(r, 2) {
			ep.Labels[model.TLSModeLabel] = model.TLSModeIstio
			ep.MTLS = true
		}
		eps = append(eps, ep)
		descs = append(descs, fmt.Sprintf("%s:%d(%s) %s %s sa=%q mtls=%v %s pod=%v", ep.Address, ep.Port, ep.ServicePortName,
			ep.Labels["version"], ep.Health, ep.ServiceAccount, ep.MTLS, ep.Locality.Region, ep.FromPod))
	}
	desc := fmt.Sprintf("EndpointSlice %s/%s: [%s]", s.ns, slice, strings.Join(descs, ", "))
	return convStep{desc: desc, apply: func(st model.Store) { st.SetEndpoints(s.key(), slice, eps) }}
}

func convNamespaceStep(r *rand.Rand) convStep {
	ns := oneOf(r, convApps, convWeb)
	if chance(r, 4) {
		return convStep{desc: "delete Namespace " + ns, apply: func(st model.Store) { st.DeleteNamespace(ns) }}
	}
	labels := oneOf(r, map[string]string{}, map[string]string{"istio-injection": "enabled"},
		map[string]string{model.DataplaneModeLabel: "ambient"})
	return convStep{desc: fmt.Sprintf("Namespace %s labels=%v", ns, labels),
		apply: func(st model.Store) { st.UpsertNamespace(&model.Namespace{Name: ns, Labels: labels}) }}
}

// convWorkloadStep changes the Pod of a namespace's client proxies: their
// inbound side follows it (the Services that select it, the workload
// PeerAuthentication that selects it).
func convWorkloadStep(r *rand.Rand) convStep {
	ns := oneOf(r, convApps, convWeb)
	key := model.NamespacedName{Namespace: ns, Name: "client"}
	if chance(r, 4) {
		return convStep{desc: "delete Pod " + key.String(), apply: func(st model.Store) { st.DeleteWorkload(key) }}
	}
	w := convClientPod(ns, oneOf(r, "v1", "v2"), chance(r, 2))
	return convStep{desc: fmt.Sprintf("Pod %s labels=%v redirected=%v", key, w.Labels, w.Redirected),
		apply: func(st model.Store) { st.UpsertWorkload(w) }}
}

// convBackendPodStep changes one of the Pods at the addresses a Service's
// endpoints use (10.1.<index>.1-4): node proxies learn them as workloads,
// each with the Services that select it, or, for a Service without a
// selector, whose slices name it. Its labels, identity, readiness, node and
// capture change under the endpoints that name it, as in a rollout.
func convBackendPodStep(r *rand.Rand) convStep {
	s := oneOf(r, convServices...)
	k := 1 + r.IntN(4)
	key := model.NamespacedName{Namespace: s.ns, Name: fmt.Sprintf("%s-%d", s.name, k)}
	if chance(r, 4) {
		return convStep{desc: "delete Pod " + key.String(), apply: func(st model.Store) { st.DeleteWorkload(key) }}
	}
	w := &model.Workload{Name: key.Name, Namespace: s.ns, IPs: []string{fmt.Sprintf("10.1.%d.%d", s.index, k)},
		ServiceAccount: oneOf(r, s.name, s.name+"-v2"),
		Labels:         map[string]string{"app": oneOf(r, s.name, s.name, s.name, "other"), "version": oneOf(r, "v1", "v2")},
		Ready:          !chance(r, 5), Redirected: chance(r, 2), NodeName: oneOf(r, "node-1", "node-2")}
	return convStep{desc: fmt.Sprintf("Pod %s labels=%v sa=%s ready=%v redirected=%v node=%s", key, w.Labels,
		w.ServiceAccount, w.Ready, w.Redirected, w.NodeName), apply: func(st model.Store) { st.UpsertWorkload(w) }}
}

// convClientPod is the Pod of namespace ns's client proxies; redirected
// says whether the node agent captures its traffic (ambient mode).
func convClientPod(ns, version string, redirected bool) *model.Workload {
	return &model.Workload{Name: "client", Namespace: ns, IPs: []string{convClientIPs[ns]}, ServiceAccount: "client",
		Labels: map[string]string{"app": "client", "version": version}, Ready: true, Redirected: redirected, NodeName: "node-1"}
}

// convIngressStep rewrites Ingress apps/web, which the ingress gateway
// serves: its paths route to apps' Services, which may be missing or not
// exported to the gateway's namespace.
func convIngressStep(r *rand.Rand) convStep {
	key := model.NamespacedName{Namespace: convApps, Name: "web"}
	if chance(r, 5) {
		return convStep{desc: "delete Ingress " + key.String(), apply: func(st model.Store) { st.DeleteIngress(key) }}
	}
	var rules []model.IngressRule
	for range 1 + r.IntN(2) {
		rule := model.IngressRule{Host: oneOf(r, "a.example.com", "b.example.com", "")}
		for range 1 + r.IntN(2) {
			backend := model.IngressBackend{ServiceName: oneOf(r, "a", "b", "c")} // c never exists
			if chance(r, 3) {
				backend.PortName = "http"
			} else {
				backend.PortNumber = oneOf(r, uint32(80), 9090)
			}
			rule.Paths = append(rule.Paths, model.IngressPath{Path: oneOf(r, "/", "/api", "/b"),
				PathType: oneOf(r, model.PathTypePrefix, model.PathTypeExact), Backend: backend})
		}
		rules = append(rules, rule)
	}
	var tls []model.IngressTLS
	if chance(r, 2) {
		// Secret "missing" never exists: the entry is dropped.
		entry := model.IngressTLS{SecretName: oneOf(r, convIngressSecret, convIngressSecret, "missing")}
		if chance(r, 2) {
			entry.Hosts = []string{oneOf(r, "a.example.com", "b.example.com")}
		}
		tls = append(tls, entry)
	}
	desc := fmt.Sprintf("Ingress %s rules=%+v tls=%+v", key, rules, tls)
	ing := &model.Ingress{Name: key.Name, Namespace: key.Namespace, ClassName: "istio", CreationTime: ruleCreated,
		// The translation is cached by revision, which the API server
		// changes with every write.
		Revision: desc, Rules: rules, TLS: tls}
	return convStep{desc: desc, apply: func(st model.Store) { st.UpsertIngress(ing) }}
}

// convGatewayServiceStep moves the gateway Service's HTTPS target port,
// which changes the gateway's listeners, and is a Service change for
// everyone else.
func convGatewayServiceStep(r *rand.Rand) convStep {
	target := oneOf(r, uint32(8443), 9443)
	return convStep{desc: fmt.Sprintf("gateway Service https targetPort=%d", target),
		apply: func(st model.Store) { upsertGatewayService(st, target) }}
}

// convSentinel is a Service that no client can see: exported to its own
// namespace only, where no client lives. The test moves its endpoint to
// tell when the server has taken every step before (awaitSentinel).
var convSentinel = convService{"convergence-sentinel", "sentinel", 9}

// convBaseWorld is what every seed starts from before its random steps:
// the gateway's Service and IngressClass, the credential Secrets, the
// client Pods, and the sentinel.
func convBaseWorld(st model.Store) {
	upsertGatewayService(st, 8443)
	st.UpsertWorkload(convClientPod(convApps, "v1", false))
	st.UpsertWorkload(convClientPod(convWeb, "v1", true))
	for _, ns := range convCredentialNamespaces {
		st.UpsertSecret(convCredentialSecret(ns, 0))
	}
	st.UpsertIngressClass(&model.IngressClass{Name: "istio", Controller: model.IngressController})
	st.UpsertService(&model.Service{Name: convSentinel.name, Namespace: convSentinel.ns, Hostname: convSentinel.host(),
		ClusterIPs: []string{"10.96.0.9"}, Ports: convPortSets[0], ExportTo: model.ExportTo{convSentinel.ns},
		Selector: map[string]string{"app": "sentinel"}})
}
