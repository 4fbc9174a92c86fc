package envoygen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushosts "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

func TestVirtualHostDomains(t *testing.T) {
	svc := func(name, ns, host string, ips ...string) *model.Service {
		return &model.Service{Name: name, Namespace: ns, Hostname: host, ClusterIPs: ips}
	}
	tests := []struct {
		desc    string
		svc     *model.Service
		proxyNs string
		want    string
	}{
		{"same namespace: every short name", svc("a", "ns", "a.ns.svc.cluster.local", "10.0.0.1"), "ns",
			"a.ns.svc.cluster.local a a.ns.svc a.ns 10.0.0.1"},
		{"other namespace: no bare name", svc("a", "ns", "a.ns.svc.cluster.local", "10.0.0.1"), "x",
			"a.ns.svc.cluster.local a.ns a.ns.svc 10.0.0.1"},
		{"custom cluster domain", svc("a", "ns", "a.ns.svc.corp.example", "10.0.0.1"), "ns",
			"a.ns.svc.corp.example a a.ns.svc a.ns 10.0.0.1"},
		{"headless: names only", svc("a", "ns", "a.ns.svc.cluster.local"), "x",
			"a.ns.svc.cluster.local a.ns a.ns.svc"},
		{"dual stack: IPv6 bracketed", svc("a", "ns", "a.ns.svc.cluster.local", "10.0.0.1", "fd00::1"), "x",
			"a.ns.svc.cluster.local a.ns a.ns.svc 10.0.0.1 [fd00::1]"},
		{"not a Kubernetes hostname: no short names", svc("a", "ns", "api.example.com", "10.0.0.1"), "ns",
			"api.example.com 10.0.0.1"},
		{"name is a prefix of another label", svc("a", "ns", "ab.ns.svc.cluster.local"), "ns",
			"ab.ns.svc.cluster.local"},
		{"proxy without namespace: no short names", svc("a", "ns", "a.ns.svc.cluster.local"), "",
			"a.ns.svc.cluster.local"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			vh := encodeVhostForTest(t, tt.svc.Hostname, 80, vhostHosts(nil, tt.svc, nil, tt.proxyNs), nil)
			if got := strings.Join(vh.GetDomains(), " "); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if name, op := vh.GetName(), vh.GetRoutes()[0].GetDecorator().GetOperation(); name != tt.svc.Hostname+":80" || op != name+"/*" {
				t.Errorf("virtual host %q with operation %q", name, op)
			}
		})
	}
}

func TestRoutePort(t *testing.T) {
	tests := []struct {
		name string
		port uint32
		ok   bool
	}{
		{"80", 80, true},
		{"65535", 65535, true},
		{"0", 0, false},
		{"65536", 0, false},
		{"080", 0, false},
		{"+80", 0, false},
		{"reviews.app.svc.cluster.local:80", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		port, ok := routePort(tt.name)
		if port != tt.port || ok != tt.ok {
			t.Errorf("routePort(%q) = %d, %v; want %d, %v", tt.name, port, ok, tt.port, tt.ok)
		}
	}
}

// TestRouteVirtualHostSharing builds route configurations for several
// namespaces with one generator, so that later ones reuse virtual hosts
// marshalled for earlier ones, and checks each against a fresh generator:
// sharing must never leak one namespace's short names or rules into
// another's.
func TestRouteVirtualHostSharing(t *testing.T) {
	const world = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: lib}
spec:
  clusterIP: 10.96.0.2
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web-hash, namespace: x}
spec:
  host: web.app.svc.cluster.local
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`
	push := pushcontext.Build(xdstest.Store(t, world), testPushOptions(), nil, nil)
	w := &model.WatchedResource{TypeURL: RouteType, ResourceNames: []string{"80"}}
	shared := NewRouteGenerator(Options{})
	for _, ns := range []string{"x", "y", "app", "lib", "", "z"} {
		proxy := lrSidecar(ns, "10.1.0.1", nil)
		got := lrGenerate(t, shared, proxy, push, w)["80"]
		want := lrGenerate(t, NewRouteGenerator(Options{}), proxy, push, w)["80"]
		if !bytes.Equal(got.Resource.GetValue(), want.Resource.GetValue()) {
			t.Errorf("namespace %s: route built with shared virtual hosts differs from a fresh build", ns)
		}
		rc := &route.RouteConfiguration{}
		if err := got.Resource.UnmarshalTo(rc); err != nil {
			t.Fatal(err)
		}
		hashed := rc.GetVirtualHosts()[1].GetRoutes()[0].GetRoute().GetHashPolicy() != nil // web sorts after api
		if hashed != (ns == "x") {
			t.Errorf("namespace %s: web has hash policy = %v; only x's local rule sets one", ns, hashed)
		}
	}
}

func encodeVhostForTest(t *testing.T, host string, port uint32, hosts []string, hash []*route.RouteAction_HashPolicy) *route.VirtualHost {
	t.Helper()
	b := encodeVhostBytes(t, host, port, hosts, hash)
	vh := &route.VirtualHost{}
	if err := proto.Unmarshal(b, vh); err != nil {
		t.Fatal(err)
	}
	return vh
}

func encodeVhostBytes(t *testing.T, host string, port uint32, hosts []string, hash []*route.RouteAction_HashPolicy) []byte {
	t.Helper()
	enc := newVhostEncoder(newRouteParts())
	hashBytes, err := hashPolicyField(hash)
	if err != nil {
		t.Fatal(err)
	}
	portStr := strconv.FormatUint(uint64(port), 10)
	b := enc.append([]byte("prefix"), host, portStr, hosts, hashBytes)[len("prefix"):]
	if size := enc.size(host, portStr, hosts, hashBytes); size != len(b) {
		t.Errorf("size %d, encoded %d bytes", size, len(b))
	}
	return b
}

// referenceVirtualHost is the virtual host the encoder must write, built as
// messages the ordinary way, with every value spelled out from Istio's
// defaults for a service's outbound route (no timeout, the mesh's default
// retry policy, the "host:port/*" decorator) rather than taken from the
// encoder's own parts.
func referenceVirtualHost(host string, port uint32, hosts []string, hash []*route.RouteAction_HashPolicy) *route.VirtualHost {
	hp := fmt.Sprintf("%s:%d", host, port)
	previousHosts, err := anypb.New(&previoushosts.PreviousHostsPredicate{})
	if err != nil {
		panic(err)
	}
	return &route.VirtualHost{
		Name:    hp,
		Domains: hosts,
		Routes: []*route.Route{{
			Name:  "default",
			Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}},
			Action: &route.Route_Route{Route: &route.RouteAction{
				ClusterSpecifier: &route.RouteAction_Cluster{Cluster: fmt.Sprintf("outbound|%d||%s", port, host)},
				Timeout:          durationpb.New(0),
				RetryPolicy: &route.RetryPolicy{
					RetryOn:    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
					NumRetries: wrapperspb.UInt32(2),
					RetryHostPredicate: []*route.RetryPolicy_RetryHostPredicate{{
						Name:       "envoy.retry_host_predicates.previous_hosts",
						ConfigType: &route.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: previousHosts},
					}},
					HostSelectionRetryMaxAttempts: 5,
				},
				MaxStreamDuration: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)},
				HashPolicy:        hash,
			}},
			Decorator: &route.Decorator{Operation: hp + "/*"},
		}},
		IncludeRequestAttemptCount: true,
	}
}

// TestVhostEncoderMatchesProto holds the hand-written encoding to the
// protobuf library's: the same bytes for the same virtual host.
func TestVhostEncoderMatchesProto(t *testing.T) {
	header := []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Header_{
		Header: &route.RouteAction_HashPolicy_Header{HeaderName: "x-user"}}}}
	cookie := []*route.RouteAction_HashPolicy{{PolicySpecifier: &route.RouteAction_HashPolicy_Cookie_{
		Cookie: &route.RouteAction_HashPolicy_Cookie{Name: "sticky", Path: "/", Ttl: durationpb.New(time.Minute)}}}}
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + ".svc.cluster.local"
	tests := []struct {
		desc  string
		host  string
		port  uint32
		hosts []string
		hash  []*route.RouteAction_HashPolicy
	}{
		{"names and an IP", "a.ns.svc.cluster.local", 80, []string{"a.ns.svc.cluster.local", "a", "a.ns.svc", "a.ns", "10.0.0.1"}, nil},
		{"FQDN only", "a.ns.svc.cluster.local", 65535, []string{"a.ns.svc.cluster.local"}, nil},
		{"IPv6", "a.ns.svc.cluster.local", 8080, []string{"a.ns.svc.cluster.local", "[fd00::1]"}, nil},
		{"header hash", "a.ns.svc.cluster.local", 8080, []string{"a.ns.svc.cluster.local"}, header},
		{"cookie hash", "a.ns.svc.cluster.local", 1, []string{"a.ns.svc.cluster.local", "10.0.0.1"}, cookie},
		{"long names (multi-byte lengths)", long, 9080, []string{long, long[:127], long[:len(long)-len(".cluster.local")]}, header},
		{"FQDN dropped as a duplicate", "a.ns.svc.cluster.local", 80, []string{"a", "a.ns"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := encodeVhostBytes(t, tt.host, tt.port, tt.hosts, tt.hash)
			want, err := lrMarshal.Marshal(referenceVirtualHost(tt.host, tt.port, tt.hosts, tt.hash))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				decoded := &route.VirtualHost{}
				_ = proto.Unmarshal(got, decoded)
				t.Errorf("encoded bytes differ from proto.Marshal\ngot  %v\nwant %v", decoded, referenceVirtualHost(tt.host, tt.port, tt.hosts, tt.hash))
			}
		})
	}
}

// TestRouteVirtualHostSharingFollowsDestinations: a VirtualService's routes
// carry the consistent hash of the rule each proxy resolves for their
// destination, which need not be the virtual host's own service. Virtual
// hosts shared between namespaces must not leak one namespace's rule for
// the destination into another's route.
func TestRouteVirtualHostSharingFollowsDestinations(t *testing.T) {
	const world = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.1
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: lib}
spec:
  clusterIP: 10.96.0.2
  ports: [{name: http, port: 80}]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: web, namespace: app}
spec:
  hosts: [web.app.svc.cluster.local]
  http: [{route: [{destination: {host: api.lib.svc.cluster.local}}]}]
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api-hash, namespace: x}
spec:
  host: api.lib.svc.cluster.local
  trafficPolicy: {loadBalancer: {consistentHash: {httpHeaderName: x-user}}}
`
	push := pushcontext.Build(xdstest.Store(t, world), testPushOptions(), nil, nil)
	w := &model.WatchedResource{TypeURL: RouteType, ResourceNames: []string{"80"}}
	for _, order := range [][]string{{"x", "y"}, {"y", "x"}} {
		shared := NewRouteGenerator(Options{})
		for _, ns := range order {
			proxy := lrSidecar(ns, "10.1.0.1", nil)
			got := lrGenerate(t, shared, proxy, push, w)["80"]
			rc := &route.RouteConfiguration{}
			if err := got.Resource.UnmarshalTo(rc); err != nil {
				t.Fatal(err)
			}
			var hashed bool
			for _, vh := range rc.GetVirtualHosts() {
				if vh.GetName() == "web.app.svc.cluster.local:80" {
					hashed = vh.GetRoutes()[0].GetRoute().GetHashPolicy() != nil
				}
			}
			if hashed != (ns == "x") {
				t.Errorf("order %v, namespace %s: web's route to api has hash policy = %v; only x's local rule for api sets one", order, ns, hashed)
			}
		}
	}
}
