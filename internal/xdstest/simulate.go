package xdstest

import (
	"fmt"
	"net/netip"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Simulation routes a request through one proxy's generated configuration
// the way Envoy would: listener, filter chain, connection manager and
// route configuration (or tcp_proxy), cluster, load assignment, and the
// endpoints its load balancer may pick. It models what meshpilot's
// generators emit and refuses, with OutcomeUnsupported, any match or
// action it does not model, so a test never passes on a guess.
type Simulation struct {
	listeners   []*listener.Listener
	routes      map[string]*route.RouteConfiguration
	clusters    map[string]*cluster.Cluster
	assignments map[string]*endpoint.ClusterLoadAssignment
}

// Request is one connection (and, on an HTTP listener, one request on it)
// leaving the proxy, or arriving at a gateway.
type Request struct {
	// DestinationIP and Port are where the client sent the connection: for
	// a sidecar, the original destination that iptables redirected to the
	// virtual outbound listener; for a gateway, the address it listens on.
	DestinationIP string
	Port          uint32
	// SNI, when set, makes the connection TLS with that server name, as
	// the TLS inspector reports it to filter chain matching.
	SNI string
	// TLS makes the connection TLS without a server name; ALPN is what its
	// client offers, and ClientCertificate says whether it presents one
	// (as a sidecar does under mutual TLS).
	TLS               bool
	ALPN              []string
	ClientCertificate bool
	// Inbound makes the connection arrive at the proxy's workload: iptables
	// redirects it to the inbound listener (traffic_direction INBOUND),
	// whose chains match the original destination port.
	Inbound bool
	// Host is the Host header (:authority); Path the :path, query included.
	Host    string
	Path    string
	Method  string // GET when empty
	Headers map[string]string
}

// Outcome is how a simulated request ended.
type Outcome string

const (
	// OutcomeRouted: the request reached a cluster with endpoints to pick from.
	OutcomeRouted Outcome = "routed"
	// OutcomeNoListener: no listener and no filter chain took the
	// connection; Envoy closes it.
	OutcomeNoListener Outcome = "no listener"
	// OutcomeNoRoute: no virtual host or no route matched (Envoy's 404).
	OutcomeNoRoute Outcome = "no route"
	// OutcomeNoCluster: the route names a cluster CDS did not send (503).
	OutcomeNoCluster Outcome = "no cluster"
	// OutcomeDangling: a resource that another names is missing, so Envoy
	// would keep the naming one warming (RDS for a listener, EDS for a cluster).
	OutcomeDangling Outcome = "dangling"
	// OutcomeNoHealthyUpstream: the cluster has no endpoint to pick (503).
	OutcomeNoHealthyUpstream Outcome = "no healthy upstream"
	// OutcomeWeighted: the route splits traffic; Result.Weighted has the
	// clusters, each resolvable with Simulation.Cluster.
	OutcomeWeighted Outcome = "weighted clusters"
	// OutcomeUnsupported: the configuration uses something the simulation
	// does not model; Result.Detail says what.
	OutcomeUnsupported Outcome = "unsupported"
	// OutcomeTLSRefused: the chain terminates TLS, requires a client
	// certificate, and the client presented none; the handshake fails.
	OutcomeTLSRefused Outcome = "TLS handshake refused"
)

// Result is where a request went, step by step; fields after the step at
// which it stopped are empty.
type Result struct {
	Outcome     Outcome
	Detail      string // why it stopped, for every outcome but routed
	Listener    string
	FilterChain string // its name, or "#<index>" when unnamed
	// TLSTerminated is set when the chain terminates TLS, and
	// ClientCertRequired when it requires a client certificate.
	TLSTerminated, ClientCertRequired bool
	RouteConfig                       string
	VirtualHost                       string
	Route                             string
	// Authority is the :authority the upstream receives: the request's
	// Host, without its port under strip_any_host_port, or the route's
	// host_rewrite_literal. The other host rewrites are not modelled and
	// leave it empty.
	Authority string
	// HashPolicy describes the route's hash policies ("header:x-user",
	// "cookie:session", "query_parameter:q", "source_ip").
	HashPolicy []string
	// Tunnel is tcp_proxy's tunnelling hostname, with " (POST)" when the
	// tunnel uses POST instead of CONNECT.
	Tunnel   string
	Weighted []WeightedCluster
	Upstream
}

// WeightedCluster is one cluster of a weighted_clusters route.
type WeightedCluster struct {
	Name   string
	Weight uint32
}

// Upstream is a cluster and the endpoints its load balancer picks from.
type Upstream struct {
	Cluster  string
	Type     string // EDS, ORIGINAL_DST, STATIC...
	LbPolicy string
	// Endpoints are those that receive traffic (see Simulation.Cluster),
	// in the order of the load assignment.
	Endpoints []Endpoint
	// Panic is set when Envoy's panic threshold made it ignore health.
	Panic bool
}

// Endpoint is one upstream address that may receive a request.
type Endpoint struct {
	Address  string // ip:port
	Priority uint32
	// LocalityWeight is the locality's load_balancing_weight, when the
	// cluster uses locality weighted load balancing; 0 otherwise.
	LocalityWeight uint32
}

// NewSimulation indexes one proxy's resources (Listener, RouteConfiguration,
// Cluster and ClusterLoadAssignment messages, in any order) by name.
func NewSimulation(resources ...proto.Message) (*Simulation, error) {
	s := &Simulation{
		routes:      map[string]*route.RouteConfiguration{},
		clusters:    map[string]*cluster.Cluster{},
		assignments: map[string]*endpoint.ClusterLoadAssignment{},
	}
	for _, r := range resources {
		switch m := r.(type) {
		case *listener.Listener:
			s.listeners = append(s.listeners, m)
		case *route.RouteConfiguration:
			s.routes[m.GetName()] = m
		case *cluster.Cluster:
			s.clusters[m.GetName()] = m
		case *endpoint.ClusterLoadAssignment:
			s.assignments[m.GetClusterName()] = m
		default:
			return nil, fmt.Errorf("xdstest: simulation cannot use %T", r)
		}
	}
	return s, nil
}

// SimulationOf unpacks generated resources, of any of the four types, into
// a Simulation.
func SimulationOf(sets ...model.Resources) (*Simulation, error) {
	var msgs []proto.Message
	for _, set := range sets {
		for _, r := range set {
			m, err := r.Resource.UnmarshalNew()
			if err != nil {
				return nil, fmt.Errorf("xdstest: %s: %w", r.Name, err)
			}
			msgs = append(msgs, m)
		}
	}
	return NewSimulation(msgs...)
}

// Route sends req through the proxy.
func (s *Simulation) Route(req Request) Result {
	var res Result
	l := s.entryListener(req)
	if l == nil {
		return stop(res, OutcomeNoListener, fmt.Sprintf("no listener on %s", hostPortOf(req.DestinationIP, req.Port)))
	}
	// Envoy's use_original_dst: "the listener hands off redirected
	// connections to the listener associated with the original destination
	// address. If there is no listener associated with the original
	// destination address, the connection is handled by the listener that
	// receives it" (listener.proto, use_original_dst). An exact address
	// wins over a listener on the wildcard address with the same port.
	if l.GetUseOriginalDst().GetValue() {
		if target := s.handoffListener(l, req); target != nil {
			l = target
		}
	}
	res.Listener = l.GetName()
	chain, name, why := matchFilterChain(l, req)
	if chain == nil {
		if why != "" {
			return stop(res, OutcomeUnsupported, why)
		}
		return stop(res, OutcomeNoListener, fmt.Sprintf("listener %s: no filter chain matches", l.GetName()))
	}
	res.FilterChain = name
	if ts := chain.GetTransportSocket(); ts != nil {
		refused, detail, ok := terminateTLS(&res, ts, req)
		if !ok {
			return stop(res, OutcomeUnsupported, detail)
		}
		if refused {
			return stop(res, OutcomeTLSRefused, detail)
		}
	}
	return s.runNetworkFilters(res, chain, req)
}

func stop(res Result, o Outcome, detail string) Result {
	res.Outcome, res.Detail = o, detail
	return res
}

// entryListener is the listener that accepts the connection: the one
// bound to the virtual outbound port with use_original_dst (iptables
// redirects every outbound connection there), else the one bound to the
// destination itself, as at a gateway.
func (s *Simulation) entryListener(req Request) *listener.Listener {
	if req.Inbound {
		for _, l := range s.listeners {
			if l.GetTrafficDirection() == core.TrafficDirection_INBOUND && boundToPort(l) {
				return l
			}
		}
		return nil
	}
	for _, l := range s.listeners {
		if l.GetUseOriginalDst().GetValue() && boundToPort(l) {
			return l
		}
	}
	return s.listenerFor(req, func(l *listener.Listener) bool { return boundToPort(l) })
}

func (s *Simulation) handoffListener(from *listener.Listener, req Request) *listener.Listener {
	return s.listenerFor(req, func(l *listener.Listener) bool { return l != from })
}

// listenerFor finds the listener whose address (or additional address) is
// ip:port, else one on the wildcard address and port.
func (s *Simulation) listenerFor(req Request, eligible func(*listener.Listener) bool) *listener.Listener {
	var wildcard *listener.Listener
	for _, l := range s.listeners {
		if !eligible(l) {
			continue
		}
		for _, a := range listenerAddresses(l) {
			sa := a.GetSocketAddress()
			if sa.GetPortValue() != req.Port {
				continue
			}
			switch sa.GetAddress() {
			case req.DestinationIP:
				return l
			case "0.0.0.0", "::":
				if wildcard == nil {
					wildcard = l
				}
			}
		}
	}
	return wildcard
}

func listenerAddresses(l *listener.Listener) []*core.Address {
	out := []*core.Address{l.GetAddress()}
	for _, a := range l.GetAdditionalAddresses() {
		out = append(out, a.GetAddress())
	}
	return out
}

// boundToPort: bind_to_port defaults to true.
func boundToPort(l *listener.Listener) bool {
	return l.GetBindToPort() == nil || l.GetBindToPort().GetValue()
}

// runNetworkFilters follows the chain's terminal filter: an HTTP
// connection manager or a tcp_proxy.
func (s *Simulation) runNetworkFilters(res Result, chain *listener.FilterChain, req Request) Result {
	filters := chain.GetFilters()
	if len(filters) == 0 {
		return stop(res, OutcomeUnsupported, "filter chain has no filters")
	}
	cfg, err := filters[len(filters)-1].GetTypedConfig().UnmarshalNew()
	if err != nil {
		return stop(res, OutcomeUnsupported, err.Error())
	}
	switch f := cfg.(type) {
	case *hcm.HttpConnectionManager:
		return s.routeHTTP(res, f, req)
	case *tcp.TcpProxy:
		if t := f.GetTunnelingConfig(); t != nil {
			res.Tunnel = t.GetHostname()
			if t.GetUsePost() {
				res.Tunnel += " (POST)"
			}
		}
		name := f.GetCluster()
		if name == "" {
			return stop(res, OutcomeUnsupported, "tcp_proxy without a single cluster")
		}
		return s.toCluster(res, name, req)
	default:
		return stop(res, OutcomeUnsupported, fmt.Sprintf("network filter %T", cfg))
	}
}

// toCluster resolves the cluster a route or tcp_proxy chose.
func (s *Simulation) toCluster(res Result, name string, req Request) Result {
	up, outcome, detail := s.Cluster(name, req)
	res.Upstream = up
	if outcome != OutcomeRouted {
		return stop(res, outcome, detail)
	}
	res.Outcome = OutcomeRouted
	return res
}

func hostPortOf(ip string, port uint32) string {
	if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
		ip = "[" + ip + "]"
	}
	return ip + ":" + strconv.FormatUint(uint64(port), 10)
}
