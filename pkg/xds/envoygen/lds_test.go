package envoygen

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// lrSharingWorld has services in two namespaces, two Pods of one Deployment
// and one of another, and a workload-selected DestinationRule in app.
const lrSharingWorld = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: app}
spec:
  clusterIP: 10.96.0.1
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}, {name: tcp, port: 5000}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: app}
spec:
  clusterIP: 10.96.0.2
  selector: {app: api}
  ports: [{name: grpc, port: 7070}]
---
apiVersion: v1
kind: Service
metadata: {name: hidden, namespace: other, annotations: {networking.istio.io/exportTo: "."}}
spec:
  clusterIP: 10.96.0.3
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: app, labels: {app: web}}
spec: {containers: [{name: c, image: web}]}
status: {podIP: 10.1.0.1, podIPs: [{ip: 10.1.0.1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: app, labels: {app: web}}
spec: {containers: [{name: c, image: web}]}
status: {podIP: 10.1.0.2, podIPs: [{ip: 10.1.0.2}]}
---
apiVersion: v1
kind: Pod
metadata: {name: api-1, namespace: app, labels: {app: api}}
spec: {containers: [{name: c, image: api}]}
status: {podIP: 10.1.0.3, podIPs: [{ip: 10.1.0.3}]}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: web-tunnel-for-api, namespace: app}
spec:
  host: web.app.svc.cluster.local
  workloadSelector: {matchLabels: {app: api}}
  trafficPolicy:
    tunnel: {targetHost: tunnel.example.com, targetPort: 443}
`

func lrSidecar(ns, ip string, labels map[string]string) *model.Proxy {
	return &model.Proxy{ID: "sidecar~" + ip + "~p." + ns + "~" + ns + ".svc.cluster.local", Type: model.SidecarProxy,
		IPAddresses: []string{ip}, Namespace: ns, Labels: labels}
}

func lrGenerate(t *testing.T, g Generator, proxy *model.Proxy, push *pushcontext.PushContext, w *model.WatchedResource) map[string]model.Resource {
	t.Helper()
	res, err := g.Generate(proxy, push, w, &model.PushRequest{Full: true})
	if err != nil {
		t.Fatal(err)
	}
	checkResources(t, w, res)
	out := map[string]model.Resource{}
	for _, r := range res {
		out[r.Name] = r
	}
	return out
}

var (
	ldsWildcard = &model.WatchedResource{TypeURL: ListenerType, Wildcard: true}
	rdsPorts    = &model.WatchedResource{TypeURL: RouteType, ResourceNames: []string{"7070", "80"}}
)

// TestListenerSharing asserts that proxies with equal inputs get the very
// same marshalled resources (built once), and proxies that differ in an
// input that matters do not.
func TestListenerSharing(t *testing.T) {
	push := pushcontext.Build(xdstest.Store(t, lrSharingWorld), testPushOptions(), nil, nil)
	lds, rds := NewListenerGenerator(Options{}), NewRouteGenerator(Options{})
	web1 := lrSidecar("app", "10.1.0.1", map[string]string{"app": "web"})
	web2 := lrSidecar("app", "10.1.0.2", map[string]string{"app": "web"})
	api := lrSidecar("app", "10.1.0.3", map[string]string{"app": "api"})
	other := lrSidecar("other", "10.2.0.1", nil)

	l1, l2 := lrGenerate(t, lds, web1, push, ldsWildcard), lrGenerate(t, lds, web2, push, ldsWildcard)
	la, lo := lrGenerate(t, lds, api, push, ldsWildcard), lrGenerate(t, lds, other, push, ldsWildcard)
	sameAny := func(a, b map[string]model.Resource, name string) bool {
		ra, okA := a[name]
		rb, okB := b[name]
		return okA && okB && ra.Resource == rb.Resource
	}
	tests := []struct {
		desc string
		a, b map[string]model.Resource
		name string
		same bool
	}{
		{"pods of one deployment share virtualInbound", l1, l2, VirtualInboundListener, true},
		{"pods of one deployment share outbound listeners", l1, l2, "10.96.0.1_5000", true},
		{"pods of one deployment share HTTP listeners", l1, l2, "0.0.0.0_80", true},
		{"pods with other ports have their own virtualInbound", l1, la, VirtualInboundListener, false},
		{"a workload-selected rule gives its proxy its own outbound listeners", l1, la, "10.96.0.1_5000", false},
		{"virtualOutbound is shared by everyone", l1, lo, VirtualOutboundListener, true},
		{"namespaces resolving the same rule share TCP listeners", l1, lo, "10.96.0.1_5000", true},
		{"namespaces share HTTP listeners", l1, lo, "0.0.0.0_80", true},
	}
	for _, tt := range tests {
		if got := sameAny(tt.a, tt.b, tt.name); got != tt.same {
			t.Errorf("%s: %s shared = %v, want %v", tt.desc, tt.name, got, tt.same)
		}
	}
	if _, ok := lo["0.0.0.0_80"]; !ok {
		t.Errorf("namespace other lacks 0.0.0.0_80 (it sees web and its own hidden service)")
	}
	if tunnel := lrTCPProxyOf(t, la["10.96.0.1_5000"]).GetTunnelingConfig(); tunnel.GetHostname() != "tunnel.example.com:443" {
		t.Errorf("api proxy: tunneling config %v, want the workload-selected rule's", tunnel)
	}
	if tunnel := lrTCPProxyOf(t, l1["10.96.0.1_5000"]).GetTunnelingConfig(); tunnel != nil {
		t.Errorf("web proxy: tunneling config %v, want none (the rule selects api only)", tunnel)
	}

	r1, r2, ro := lrGenerate(t, rds, web1, push, rdsPorts), lrGenerate(t, rds, web2, push, rdsPorts), lrGenerate(t, rds, other, push, rdsPorts)
	if !sameAny(r1, r2, "80") {
		t.Errorf("route 80 not shared by two proxies of one namespace")
	}
	if sameAny(r1, ro, "80") {
		t.Errorf("route 80 shared across namespaces, whose short names and visibility differ")
	}

	// A new snapshot builds anew, even from an unchanged store.
	next := pushcontext.Build(xdstest.Store(t, lrSharingWorld), testPushOptions(), nil, nil)
	if n1 := lrGenerate(t, lds, web1, next, ldsWildcard); sameAny(l1, n1, "0.0.0.0_80") {
		t.Errorf("listener served from the previous push context's cache")
	}
}

func lrTCPProxyOf(t *testing.T, r model.Resource) *tcp.TcpProxy {
	t.Helper()
	if r.Resource == nil {
		t.Fatal("no such listener")
	}
	l := &listener.Listener{}
	if err := r.Resource.UnmarshalTo(l); err != nil {
		t.Fatal(err)
	}
	p := &tcp.TcpProxy{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestListenerSubscriptions(t *testing.T) {
	push := pushcontext.Build(xdstest.Store(t, lrSharingWorld), testPushOptions(), nil, nil)
	lds, rds := NewListenerGenerator(Options{}), NewRouteGenerator(Options{})
	web1 := lrSidecar("app", "10.1.0.1", map[string]string{"app": "web"})
	router := &model.Proxy{ID: "router~10.1.9.9~gw.istio-system~istio-system.svc.cluster.local", Type: model.Router,
		IPAddresses: []string{"10.1.9.9"}, Namespace: "istio-system"}
	tests := []struct {
		desc  string
		gen   Generator
		proxy *model.Proxy
		w     *model.WatchedResource
		want  []string
	}{
		{"explicit listener names filter", lds, web1,
			&model.WatchedResource{TypeURL: ListenerType, ResourceNames: []string{"0.0.0.0_80", "nope", VirtualOutboundListener}},
			[]string{"0.0.0.0_80", VirtualOutboundListener}},
		{"wildcard RDS lists every HTTP port", rds, web1,
			&model.WatchedResource{TypeURL: RouteType, Wildcard: true}, []string{"7070", "80"}},
		{"wildcard RDS keeps explicit extras", rds, web1,
			&model.WatchedResource{TypeURL: RouteType, Wildcard: true, ResourceNames: []string{"80", "9090"}}, []string{"7070", "80", "9090"}},
		{"router LDS is empty", lds, router, ldsWildcard, nil},
		{"router RDS is empty", rds, router, rdsPorts, nil},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			res, err := tt.gen.Generate(tt.proxy, push, tt.w, &model.PushRequest{Full: true})
			if err != nil {
				t.Fatal(err)
			}
			if res == nil {
				t.Fatal("nil result; an empty response must still be a (valid) response")
			}
			var got []string
			for _, r := range res {
				got = append(got, r.Name)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTunnelDroppedWithReason feeds rules that the sources' validation would
// have refused straight into the store: the generator must still leave the
// tunnel out, keep the listener, and report the rule once per push.
func TestTunnelDroppedWithReason(t *testing.T) {
	tests := []struct {
		desc   string
		tunnel *networking.TrafficPolicy_TunnelSettings
		reason string
	}{
		{"unknown protocol", &networking.TrafficPolicy_TunnelSettings{Protocol: "GET", TargetHost: "x.example", TargetPort: 443}, `neither CONNECT nor POST`},
		{"no target host", &networking.TrafficPolicy_TunnelSettings{TargetPort: 443}, "targetHost is empty"},
		{"no target port", &networking.TrafficPolicy_TunnelSettings{TargetHost: "x.example"}, "targetPort 0 is not a valid port"},
		{"port out of range", &networking.TrafficPolicy_TunnelSettings{TargetHost: "x.example", TargetPort: 70000}, "targetPort 70000 is not a valid port"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			store := model.NewStore()
			store.UpsertService(&model.Service{Name: "proxy", Namespace: "egress", Hostname: "proxy.egress.svc.cluster.local",
				ClusterIPs: []string{"10.96.0.9"}, Ports: []*model.Port{{Name: "tcp", Port: 3128, Protocol: model.ProtocolTCP, TargetPort: 3128}}})
			store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Name: "tunnel", Namespace: "egress",
				CreationTime: time.Unix(1, 0), Spec: &networking.DestinationRule{Host: "proxy.egress.svc.cluster.local",
					TrafficPolicy: &networking.TrafficPolicy{Tunnel: tt.tunnel}}})
			push := pushcontext.Build(store, testPushOptions(), nil, nil)
			var logs bytes.Buffer
			lds := NewListenerGenerator(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			for _, ns := range []string{"a", "b"} { // two scopes: two builds, one report
				res := lrGenerate(t, lds, lrSidecar(ns, "10.1.0.1", nil), push, ldsWildcard)
				if tunnel := lrTCPProxyOf(t, res["10.96.0.9_3128"]).GetTunnelingConfig(); tunnel != nil {
					t.Errorf("namespace %s: tunneling config %v kept", ns, tunnel)
				}
			}
			if got := push.ProblemCount(); got != 1 {
				t.Errorf("ProblemCount = %d, want 1", got)
			}
			if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), tt.reason) ||
				!strings.Contains(logs.String(), "name=tunnel") {
				t.Errorf("want one warning naming the rule and %q; got:\n%s", tt.reason, logs.String())
			}
		})
	}
}

// TestListenerConcurrentProxies generates for many proxies at once from
// shared generators, as connections do, and checks every result against a
// fresh, single-proxy generation (run with -race).
func TestListenerConcurrentProxies(t *testing.T) {
	push := pushcontext.Build(xdstest.Store(t, lrSharingWorld), testPushOptions(), nil, nil)
	proxies := []*model.Proxy{
		lrSidecar("app", "10.1.0.1", map[string]string{"app": "web"}),
		lrSidecar("app", "10.1.0.2", map[string]string{"app": "web"}),
		lrSidecar("app", "10.1.0.3", map[string]string{"app": "api"}),
		lrSidecar("other", "10.2.0.1", nil),
		lrSidecar("third", "10.3.0.1", nil),
	}
	type job struct {
		gen   func(Options) Generator
		w     *model.WatchedResource
		proxy *model.Proxy
	}
	var jobs []job
	for range 4 {
		for _, p := range proxies {
			jobs = append(jobs, job{NewListenerGenerator, ldsWildcard, p}, job{NewRouteGenerator, rdsPorts, p})
		}
	}
	lds, rds := NewListenerGenerator(Options{}), NewRouteGenerator(Options{})
	results := make([]model.Resources, len(jobs))
	errs := make([]error, len(jobs))
	done := make(chan int)
	for i, j := range jobs {
		go func() {
			g := lds
			if j.w.TypeURL == RouteType {
				g = rds
			}
			results[i], errs[i] = g.Generate(j.proxy, push, j.w, &model.PushRequest{Full: true})
			done <- i
		}()
	}
	for range jobs {
		<-done
	}
	for i, j := range jobs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		want, err := j.gen(Options{}).Generate(j.proxy, push, j.w, &model.PushRequest{Full: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(want) != len(results[i]) {
			t.Fatalf("%s for %s: %d resources, want %d", j.w.TypeURL, j.proxy.ID, len(results[i]), len(want))
		}
		for k := range want {
			if want[k].Name != results[i][k].Name || !bytes.Equal(want[k].Resource.GetValue(), results[i][k].Resource.GetValue()) {
				t.Errorf("%s for %s: %s differs from a fresh generation", j.w.TypeURL, j.proxy.ID, want[k].Name)
			}
		}
	}
}
