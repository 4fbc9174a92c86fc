package httproute

import (
	"slices"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// appliesTo reports whether an HTTP match can select requests that this
// proxy sends to this service port: a match pinned to another port, to
// other sources, or to gateways only never does.
func (t *translation) appliesTo(m *networking.HTTPMatchRequest) bool {
	if m.GetPort() != 0 && m.GetPort() != t.in.Port {
		return false
	}
	if gws := m.GetGateways(); len(gws) > 0 && !slices.Contains(gws, "mesh") {
		return false
	}
	return pushcontext.SourceMatches(m, t.in.Proxy)
}

// routeMatch translates one HTTP match. ok is false when the client cannot
// express it (gRPC has no query parameter matching; gRFC A28 has clients
// ignore such routes, so sending it would be pointless).
func (t *translation) routeMatch(m *networking.HTTPMatchRequest, field string) (_ *route.RouteMatch, ok bool) {
	out := &route.RouteMatch{}
	switch u := m.GetUri().GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		out.PathSpecifier = &route.RouteMatch_Path{Path: u.Exact}
	case *networking.StringMatch_Prefix:
		out.PathSpecifier = &route.RouteMatch_Prefix{Prefix: u.Prefix}
	case *networking.StringMatch_Regex:
		out.PathSpecifier = &route.RouteMatch_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: u.Regex}}
	default:
		out.PathSpecifier = &route.RouteMatch_Prefix{Prefix: "/"}
	}
	if m.GetIgnoreUriCase() {
		out.CaseSensitive = wrapperspb.Bool(false)
	}
	// Pseudo-headers carry what HTTP/2 puts in the request line; Envoy and
	// gRPC both match them like headers.
	for _, p := range []struct {
		name string
		sm   *networking.StringMatch
	}{{":method", m.GetMethod()}, {":authority", m.GetAuthority()}, {":scheme", m.GetScheme()}} {
		if p.sm != nil {
			out.Headers = append(out.Headers, headerMatcher(p.name, p.sm, false))
		}
	}
	for _, name := range sortedKeys(m.GetHeaders()) {
		out.Headers = append(out.Headers, headerMatcher(name, m.GetHeaders()[name], false))
	}
	for _, name := range sortedKeys(m.GetWithoutHeaders()) {
		out.Headers = append(out.Headers, headerMatcher(name, m.GetWithoutHeaders()[name], true))
	}
	if len(m.GetQueryParams()) > 0 {
		if t.in.Flavor == GRPC {
			t.drop(field+".queryParams", "gRPC clients cannot match query parameters; this match is left out for them")
			return nil, false
		}
		for _, name := range sortedKeys(m.GetQueryParams()) {
			out.QueryParameters = append(out.QueryParameters, queryMatcher(name, m.GetQueryParams()[name]))
		}
	}
	return out, true
}

// headerMatcher matches a header by Istio's StringMatch. An empty match
// (no exact, prefix or regex) only asks for the header to be present, as
// in Istio.
func headerMatcher(name string, sm *networking.StringMatch, invert bool) *route.HeaderMatcher {
	h := &route.HeaderMatcher{Name: strings.ToLower(name), InvertMatch: invert}
	if s := stringMatcher(sm); s != nil {
		h.HeaderMatchSpecifier = &route.HeaderMatcher_StringMatch{StringMatch: s}
	} else {
		h.HeaderMatchSpecifier = &route.HeaderMatcher_PresentMatch{PresentMatch: true}
	}
	return h
}

// queryMatcher matches a query parameter; one given without a value is
// matched by presence, as in Istio.
func queryMatcher(name string, sm *networking.StringMatch) *route.QueryParameterMatcher {
	q := &route.QueryParameterMatcher{Name: name}
	if s := stringMatcher(sm); s != nil {
		q.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_StringMatch{StringMatch: s}
	} else {
		q.QueryParameterMatchSpecifier = &route.QueryParameterMatcher_PresentMatch{PresentMatch: true}
	}
	return q
}

func stringMatcher(sm *networking.StringMatch) *matcher.StringMatcher {
	switch v := sm.GetMatchType().(type) {
	case *networking.StringMatch_Exact:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: v.Exact}}
	case *networking.StringMatch_Prefix:
		if v.Prefix == "" {
			return nil
		}
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Prefix{Prefix: v.Prefix}}
	case *networking.StringMatch_Regex:
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_SafeRegex{SafeRegex: &matcher.RegexMatcher{Regex: v.Regex}}}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
