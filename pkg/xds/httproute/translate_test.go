package httproute

import (
	"slices"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

const (
	webHost = "web.app.svc.cluster.local"
	apiHost = "api.app.svc.cluster.local"
)

// testPush holds web (one port, 80) with subsets v1 and v2, and api (ports
// 80 and 9090) without a DestinationRule.
func testPush(t *testing.T, vs *networking.VirtualService) (*pushcontext.PushContext, *pushcontext.VirtualService) {
	t.Helper()
	store := model.NewStore()
	store.UpsertService(&model.Service{Name: "web", Namespace: "app", Hostname: webHost,
		Ports: []*model.Port{{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080}}})
	store.UpsertService(&model.Service{Name: "api", Namespace: "app", Hostname: apiHost,
		Ports: []*model.Port{
			{Name: "http", Port: 80, Protocol: model.ProtocolHTTP, TargetPort: 8080},
			{Name: "grpc", Port: 9090, Protocol: model.ProtocolGRPC, TargetPort: 9090},
		}})
	store.UpsertConfig(&model.Config{Kind: model.KindDestinationRule, Namespace: "app", Name: "web", CreationTime: time.Unix(0, 0),
		Spec: &networking.DestinationRule{Host: "web", Subsets: []*networking.Subset{
			{Name: "v1", Labels: map[string]string{"version": "v1"}},
			{Name: "v2", Labels: map[string]string{"version": "v2"}},
		}}})
	store.UpsertConfig(&model.Config{Kind: model.KindVirtualService, Namespace: "app", Name: "routes", CreationTime: time.Unix(0, 0), Spec: vs})
	push := pushcontext.Build(store, pushcontext.Options{}, nil, nil)
	got := push.VirtualServiceFor("client", webHost)
	if got == nil {
		t.Fatal("the VirtualService does not apply to web from namespace client")
	}
	return push, got
}

func dest(host, subset string, weight int32) *networking.HTTPRouteDestination {
	return &networking.HTTPRouteDestination{Destination: &networking.Destination{Host: host, Subset: subset}, Weight: weight}
}

func exact(s string) *networking.StringMatch {
	return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: s}}
}

// envoyRetry stands in for the mesh default the Envoy generator passes.
var envoyRetry = &route.RetryPolicy{RetryOn: "connect-failure", NumRetries: wrapperspb.UInt32(2)}

func prefixAll() *route.RouteMatch {
	return &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
}

func toCluster(name string) *route.RouteAction {
	return &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: name}}
}

// envoyDefaults are what a forwarding route for Envoy carries when the
// VirtualService sets no timeout or retries: no timeout (0s), the
// grpc-timeout header honoured as sent, the mesh's retry policy.
func envoyDefaults(a *route.RouteAction) *route.RouteAction {
	a.Timeout = durationpb.New(0)
	a.MaxStreamDuration = &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)}
	a.RetryPolicy = envoyRetry
	return a
}

func TestRoutes(t *testing.T) {
	cases := []struct {
		name    string
		flavor  Flavor
		labels  map[string]string
		vs      *networking.VirtualService
		want    []*route.Route
		reports []string // substrings, one per expected report
	}{
		{
			name:   "all calls to one subset",
			flavor: Envoy,
			vs:     &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{dest("web", "v2", 0)}}}},
			want: []*route.Route{{
				Match:     prefixAll(),
				Action:    &route.Route_Route{Route: envoyDefaults(toCluster("outbound|80|v2|" + webHost))},
				Decorator: &route.Decorator{Operation: webHost + ":80/*"},
			}},
		},
		{
			name:   "all calls to one subset, gRPC",
			flavor: GRPC,
			vs:     &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{dest("web", "v2", 0)}}}},
			want: []*route.Route{{
				Match:  prefixAll(),
				Action: &route.Route_Route{Route: toCluster("outbound|80|v2|" + webHost)},
			}},
		},
		{
			name:   "a weighted split; a zero weight leaves its destination out",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{
				dest("web", "v1", 90), dest("web", "v2", 10), dest(apiHost, "", 0),
			}}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{
					Clusters: []*route.WeightedCluster_ClusterWeight{
						{Name: "outbound|80|v1|" + webHost, Weight: wrapperspb.UInt32(90)},
						{Name: "outbound|80|v2|" + webHost, Weight: wrapperspb.UInt32(10)},
					},
				}}}},
			}},
		},
		{
			name:   "matches in order, one route per match, pseudo-headers first",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{
				{
					Name: "canary",
					Match: []*networking.HTTPMatchRequest{
						{Name: "by-user", Headers: map[string]*networking.StringMatch{"X-User": exact("ann"), "x-beta": {}}},
						{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/echo\\..*"}}, Method: exact("POST")},
					},
					Route: []*networking.HTTPRouteDestination{dest("web", "v2", 0)},
				},
				{Route: []*networking.HTTPRouteDestination{dest("web", "v1", 0)}},
			}},
			want: []*route.Route{
				{
					Name: "canary.by-user",
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}, Headers: []*route.HeaderMatcher{
						{Name: "x-user", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "ann"}}}},
						{Name: "x-beta", HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}},
					}},
					Action: &route.Route_Route{Route: toCluster("outbound|80|v2|" + webHost)},
				},
				{
					Name: "canary",
					Match: &route.RouteMatch{
						PathSpecifier: &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: "/echo\\..*"}},
						Headers: []*route.HeaderMatcher{
							{Name: ":method", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "POST"}}}},
						},
					},
					Action: &route.Route_Route{Route: toCluster("outbound|80|v2|" + webHost)},
				},
				{Match: prefixAll(), Action: &route.Route_Route{Route: toCluster("outbound|80|v1|" + webHost)}},
			},
		},
		{
			name:   "matches for another port, another source or a gateway only are left out",
			flavor: GRPC,
			labels: map[string]string{"app": "client"},
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Match: []*networking.HTTPMatchRequest{
					{Port: 9999},
					{SourceLabels: map[string]string{"app": "canary"}},
					{SourceNamespace: "elsewhere"},
					{Gateways: []string{"istio-system/ingress"}},
				},
				Route: []*networking.HTTPRouteDestination{dest("web", "v2", 0)},
			}}},
		},
		{
			name:   "a match on the proxy's own labels applies",
			flavor: GRPC,
			labels: map[string]string{"app": "canary", "tier": "x"},
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Match: []*networking.HTTPMatchRequest{{SourceLabels: map[string]string{"app": "canary"}, SourceNamespace: "client", Port: 80}},
				Route: []*networking.HTTPRouteDestination{dest("web", "v2", 0)},
			}}},
			want: []*route.Route{{Match: prefixAll(), Action: &route.Route_Route{Route: toCluster("outbound|80|v2|" + webHost)}}},
		},
		{
			name:   "a destination without port on a service of several ports keeps the routed port",
			flavor: GRPC,
			vs:     &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{dest("api", "", 0)}}}},
			want:   []*route.Route{{Match: prefixAll(), Action: &route.Route_Route{Route: toCluster("outbound|80||" + apiHost)}}},
		},
		{
			name:   "destinations that point nowhere are kept and reported",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{Route: []*networking.HTTPRouteDestination{
				dest("web", "v3", 50), dest("ghost", "", 50),
			}}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{
					Clusters: []*route.WeightedCluster_ClusterWeight{
						{Name: "outbound|80|v3|" + webHost, Weight: wrapperspb.UInt32(50)},
						{Name: "outbound|80||ghost.app.svc.cluster.local", Weight: wrapperspb.UInt32(50)},
					},
				}}}},
			}},
			reports: []string{`http[0].route[0].destination.subset: no DestinationRule defines subset "v3"`, "http[0].route[1].destination.host: ghost.app.svc.cluster.local is not a known service"},
		},
		{
			name:   "timeout and retries for Envoy; status codes go apart",
			flavor: Envoy,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Route:   []*networking.HTTPRouteDestination{dest("web", "", 0)},
				Timeout: durationpb.New(3 * time.Second),
				Retries: &networking.HTTPRetry{Attempts: 4, PerTryTimeout: durationpb.New(time.Second), RetryOn: "gateway-error,503,504"},
			}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
					Timeout:           durationpb.New(3 * time.Second),
					MaxStreamDuration: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(3 * time.Second)},
					RetryPolicy: &route.RetryPolicy{
						RetryOn: "gateway-error,retriable-status-codes", NumRetries: wrapperspb.UInt32(4),
						PerTryTimeout: durationpb.New(time.Second), RetriableStatusCodes: []uint32{503, 504},
					},
				}},
				Decorator: &route.Decorator{Operation: webHost + ":80/*"},
			}},
		},
		{
			name:   "attempts without retryOn: Istio's conditions, no status code",
			flavor: Envoy,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Route:   []*networking.HTTPRouteDestination{dest("web", "", 0)},
				Retries: &networking.HTTPRetry{Attempts: 3},
			}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
					Timeout:           durationpb.New(0),
					MaxStreamDuration: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)},
					RetryPolicy: &route.RetryPolicy{
						RetryOn:    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes",
						NumRetries: wrapperspb.UInt32(3),
					},
				}},
				Decorator: &route.Decorator{Operation: webHost + ":80/*"},
			}},
		},
		{
			name:   "timeout and retries for gRPC keep what gRPC understands",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Route:   []*networking.HTTPRouteDestination{dest("web", "", 0)},
				Timeout: durationpb.New(3 * time.Second),
				Retries: &networking.HTTPRetry{Attempts: 2, RetryOn: "5xx,unavailable,cancelled"},
			}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
					MaxStreamDuration: &route.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(3 * time.Second)},
					RetryPolicy:       &route.RetryPolicy{RetryOn: "unavailable,cancelled", NumRetries: wrapperspb.UInt32(2)},
				}},
			}},
			reports: []string{`http[0].retries.retryOn: gRPC clients do not retry on "5xx"`},
		},
		{
			// Istio's default conditions are not the user's: the ones gRPC
			// cannot use are left out without a report that blames the rule.
			name:   "retries without retryOn for gRPC keep Istio's default gRPC conditions, unreported",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Route:   []*networking.HTTPRouteDestination{dest("web", "", 0)},
				Retries: &networking.HTTPRetry{Attempts: 3},
			}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
					RetryPolicy:      &route.RetryPolicy{RetryOn: "unavailable,cancelled", NumRetries: wrapperspb.UInt32(3)},
				}},
			}},
		},
		{
			name:   "HTTP status codes and per-try timeouts are reported for gRPC",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Route:   []*networking.HTTPRouteDestination{dest("web", "", 0)},
				Retries: &networking.HTTPRetry{Attempts: 2, RetryOn: "503,unavailable", PerTryTimeout: durationpb.New(time.Second)},
			}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier: &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
					RetryPolicy: &route.RetryPolicy{RetryOn: "unavailable", NumRetries: wrapperspb.UInt32(2),
						PerTryTimeout: durationpb.New(time.Second)},
				}},
			}},
			reports: []string{
				`http[0].retries.retryOn: gRPC clients do not retry on "503"`,
				"http[0].retries.perTryTimeout: gRPC clients have no per-try timeout",
			},
		},
		{
			name:   "attempts 0 turns Envoy's default retries off",
			flavor: Envoy,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{{
				Route: []*networking.HTTPRouteDestination{dest("web", "", 0)}, Retries: &networking.HTTPRetry{},
			}}},
			want: []*route.Route{{
				Match: prefixAll(),
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
					Timeout:           durationpb.New(0),
					MaxStreamDuration: &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)},
				}},
				Decorator: &route.Decorator{Operation: webHost + ":80/*"},
			}},
		},
		{
			name:   "redirect, rewrite and header edits for Envoy",
			flavor: Envoy,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{
				{
					Match:    []*networking.HTTPMatchRequest{{Uri: exact("/old")}},
					Redirect: &networking.HTTPRedirect{Uri: "/new", RedirectCode: 308},
				},
				{
					Route:   []*networking.HTTPRouteDestination{dest("web", "", 0)},
					Rewrite: &networking.HTTPRewrite{Uri: "/v2/", Authority: "web.internal"},
					Headers: &networking.Headers{Request: &networking.Headers_HeaderOperations{
						Set: map[string]string{"x-a": "1"}, Add: map[string]string{"x-b": "2"}, Remove: []string{"x-c"},
					}},
					Retries: &networking.HTTPRetry{},
				},
			}},
			want: []*route.Route{
				{
					Match: &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: "/old"}},
					Action: &route.Route_Redirect{Redirect: &route.RedirectAction{
						PathRewriteSpecifier: &route.RedirectAction_PathRedirect{PathRedirect: "/new"},
						ResponseCode:         route.RedirectAction_PERMANENT_REDIRECT,
					}},
				},
				{
					Match: prefixAll(),
					Action: &route.Route_Route{Route: &route.RouteAction{
						ClusterSpecifier:     &route.RouteAction_Cluster{Cluster: "outbound|80||" + webHost},
						Timeout:              durationpb.New(0),
						MaxStreamDuration:    &route.RouteAction_MaxStreamDuration{GrpcTimeoutHeaderMax: durationpb.New(0)},
						PrefixRewrite:        "/v2/",
						HostRewriteSpecifier: &route.RouteAction_HostRewriteLiteral{HostRewriteLiteral: "web.internal"},
					}},
					Decorator: &route.Decorator{Operation: webHost + ":80/*"},
					RequestHeadersToAdd: []*core.HeaderValueOption{
						{Header: &core.HeaderValue{Key: "x-a", Value: "1"}, AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
						{Header: &core.HeaderValue{Key: "x-b", Value: "2"}, AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
					},
					RequestHeadersToRemove: []string{"x-c"},
				},
			},
		},
		{
			name:   "what gRPC cannot do is reported, never silently dropped",
			flavor: GRPC,
			vs: &networking.VirtualService{Hosts: []string{"web"}, Http: []*networking.HTTPRoute{
				{
					Match: []*networking.HTTPMatchRequest{{QueryParams: map[string]*networking.StringMatch{"q": exact("1")}}},
					Route: []*networking.HTTPRouteDestination{dest("web", "v1", 0)},
				},
				{
					Route:   []*networking.HTTPRouteDestination{dest("web", "v2", 0)},
					Rewrite: &networking.HTTPRewrite{Uri: "/x"},
					Mirror:  &networking.Destination{Host: "web", Subset: "v1"},
					Fault:   &networking.HTTPFaultInjection{Abort: &networking.HTTPFaultInjection_Abort{ErrorType: &networking.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: 500}}},
				},
			}},
			want: []*route.Route{{Match: prefixAll(), Action: &route.Route_Route{Route: toCluster("outbound|80|v2|" + webHost)}}},
			reports: []string{
				"http[0].match[0].queryParams: gRPC clients cannot match query parameters",
				"http[1].fault: fault injection is not served yet",
				"http[1].rewrite: gRPC clients cannot rewrite calls",
				"http[1].mirror: gRPC clients cannot mirror calls",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			push, vs := testPush(t, tc.vs)
			var reports []string
			in := Input{
				Flavor: tc.flavor, Push: push, VS: vs, Host: webHost, Port: 80,
				Proxy:  &model.Proxy{Namespace: "client", Labels: tc.labels},
				Report: func(r string) { reports = append(reports, r) },
			}
			if tc.flavor == Envoy {
				in.DefaultRetry = envoyRetry
			}
			got := Routes(in)
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("routes (-want +got):\n%s", diff)
			}
			for _, r := range got {
				if err := r.ValidateAll(); err != nil {
					t.Errorf("route %q fails Envoy's validation: %v", r.GetName(), err)
				}
			}
			if len(reports) != len(tc.reports) {
				t.Errorf("reports = %q, want one containing each of %q", reports, tc.reports)
			}
			for _, want := range tc.reports {
				if !slices.ContainsFunc(reports, func(r string) bool { return strings.Contains(r, want) }) {
					t.Errorf("no report contains %q; reports: %q", want, reports)
				}
			}
		})
	}
}
