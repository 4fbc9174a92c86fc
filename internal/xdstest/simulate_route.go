//lint:file-ignore SA1019 Envoy still accepts the deprecated header matchers, so the simulation must understand them.

package xdstest

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// Route matching follows route_components.proto
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/route/v3/route_components.proto):
// the virtual host is chosen by domain, then the first route of it whose
// match holds wins.

// routeHTTP runs the HTTP connection manager: its route configuration
// (inline, or by RDS), virtual host, route and action.
func (s *Simulation) routeHTTP(res Result, m *hcm.HttpConnectionManager, req Request) Result {
	rc := m.GetRouteConfig()
	if rds := m.GetRds(); rds != nil {
		res.RouteConfig = rds.GetRouteConfigName()
		if rc = s.routes[res.RouteConfig]; rc == nil {
			return stop(res, OutcomeDangling, fmt.Sprintf("listener %s waits for route configuration %q", res.Listener, res.RouteConfig))
		}
	} else if rc == nil {
		return stop(res, OutcomeUnsupported, "connection manager without RDS or an inline route configuration")
	} else {
		res.RouteConfig = rc.GetName()
	}
	res.Authority = req.Host
	if m.GetStripAnyHostPort() {
		res.Authority = stripPort(res.Authority)
	}
	host := strings.ToLower(res.Authority)
	// ignore_port_in_host_matching (RouteConfiguration, route.proto): the
	// port of :authority takes no part in choosing the virtual host; unlike
	// strip_any_host_port, the header itself keeps it.
	if rc.GetIgnorePortInHostMatching() {
		host = stripPort(host)
	}
	vh := selectVirtualHost(rc.GetVirtualHosts(), host)
	if vh == nil {
		return stop(res, OutcomeNoRoute, fmt.Sprintf("route configuration %s has no virtual host for %q", rc.GetName(), host))
	}
	res.VirtualHost = vh.GetName()
	headers := requestHeaders(req, res.Authority)
	for _, r := range vh.GetRoutes() {
		ok, why := routeMatches(r.GetMatch(), headers)
		if why != "" {
			return stop(res, OutcomeUnsupported, fmt.Sprintf("route %q: %s", r.GetName(), why))
		}
		if ok {
			res.Route = r.GetName()
			return s.runRouteAction(res, r, headers, req)
		}
	}
	return stop(res, OutcomeNoRoute, fmt.Sprintf("virtual host %s has no route for %s", vh.GetName(), req.Path))
}

// stripPort drops the port from a Host header as Envoy does for both
// strip_any_host_port and ignore_port_in_host_matching: after the last
// ':' when that follows any ']' (an IPv6 address keeps its brackets) and
// the rest is a number.
func stripPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.LastIndexByte(host, ']') > i {
		return host
	}
	if _, err := strconv.ParseUint(host[i+1:], 10, 32); err != nil {
		return host
	}
	return host[:i]
}

// selectVirtualHost uses Envoy's domain search order (VirtualHost.domains):
// exact names first, then suffix wildcards ("*.foo.com"), then prefix
// wildcards ("foo.*"), then "*"; among wildcards the longest wins, and a
// wildcard never matches an empty string. Matching ignores case.
func selectVirtualHost(vhosts []*route.VirtualHost, host string) *route.VirtualHost {
	var (
		suffix, prefix, catchAll *route.VirtualHost
		suffixLen, prefixLen     int
	)
	for _, vh := range vhosts {
		for _, d := range vh.GetDomains() {
			d = strings.ToLower(d)
			switch {
			case d == "*":
				if catchAll == nil {
					catchAll = vh
				}
			case strings.HasPrefix(d, "*"):
				if len(host) > len(d)-1 && strings.HasSuffix(host, d[1:]) && len(d) > suffixLen {
					suffix, suffixLen = vh, len(d)
				}
			case strings.HasSuffix(d, "*"):
				if len(host) > len(d)-1 && strings.HasPrefix(host, d[:len(d)-1]) && len(d) > prefixLen {
					prefix, prefixLen = vh, len(d)
				}
			case d == host:
				return vh
			}
		}
	}
	for _, vh := range []*route.VirtualHost{suffix, prefix, catchAll} {
		if vh != nil {
			return vh
		}
	}
	return nil
}

// requestHeaders are the request's headers by lower-cased name, with the
// pseudo-headers route matching sees: :authority as the connection
// manager left it.
func requestHeaders(req Request, authority string) map[string]string {
	h := map[string]string{":authority": authority, ":path": req.Path, ":method": req.Method}
	if req.Method == "" {
		h[":method"] = "GET"
	}
	for k, v := range req.Headers {
		h[strings.ToLower(k)] = v
	}
	return h
}

// routeMatches reports whether a route's match holds; why is set when it
// uses a criterion the simulation does not model.
func routeMatches(m *route.RouteMatch, headers map[string]string) (ok bool, why string) {
	if m.GetRuntimeFraction() != nil || m.GetGrpc() != nil || m.GetTlsContext() != nil ||
		len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 {
		return false, "match criteria the simulation does not model"
	}
	fullPath := headers[":path"]
	path, query, _ := strings.Cut(fullPath, "?")
	caseSensitive := m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	fold := func(s string) string {
		if caseSensitive {
			return s
		}
		return strings.ToLower(s)
	}
	switch p := m.GetPathSpecifier().(type) {
	case *route.RouteMatch_Prefix:
		// The prefix must match the beginning of :path, query included.
		ok = strings.HasPrefix(fold(fullPath), fold(p.Prefix))
	case *route.RouteMatch_Path:
		// The path must equal :path once the query string is removed.
		ok = fold(path) == fold(p.Path)
	case *route.RouteMatch_PathSeparatedPrefix:
		// The prefix must match the path (query removed) up to its end or
		// a "/": "/api" matches "/api" and "/api/x", not "/apix".
		rest, found := strings.CutPrefix(fold(path), fold(p.PathSeparatedPrefix))
		ok = found && (rest == "" || rest[0] == '/')
	case *route.RouteMatch_SafeRegex:
		// The whole path, query removed, must match.
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return false, err.Error()
		}
		ok = re.MatchString(path)
	default:
		return false, fmt.Sprintf("path specifier %T", p)
	}
	if !ok {
		return false, ""
	}
	for _, hm := range m.GetHeaders() {
		ok, why := headerMatches(hm, headers)
		if why != "" || !ok {
			return false, why
		}
	}
	values, _ := url.ParseQuery(query)
	for _, qm := range m.GetQueryParameters() {
		vs, present := values[qm.GetName()]
		switch {
		case qm.GetPresentMatch():
			ok = present
		case qm.GetStringMatch() != nil && !present:
			ok = false
		case qm.GetStringMatch() != nil:
			// Envoy compares the first value of a repeated parameter.
			var why string
			if ok, why = stringMatches(qm.GetStringMatch(), vs[0]); why != "" {
				return false, why
			}
		default:
			return false, "query parameter matcher without string_match or present_match"
		}
		if !ok {
			return false, ""
		}
	}
	return true, ""
}

// headerMatches is HeaderMatcher: a missing header fails every matcher
// but present_match: false (unless treat_missing_header_as_empty), and
// invert_match inverts the result.
func headerMatches(hm *route.HeaderMatcher, headers map[string]string) (bool, string) {
	v, present := headers[strings.ToLower(hm.GetName())]
	if !present && hm.GetTreatMissingHeaderAsEmpty() {
		v, present = "", true
	}
	var ok bool
	switch spec := hm.GetHeaderMatchSpecifier().(type) {
	case *route.HeaderMatcher_PresentMatch:
		ok = present == spec.PresentMatch
	case *route.HeaderMatcher_StringMatch:
		if present {
			var why string
			if ok, why = stringMatches(spec.StringMatch, v); why != "" {
				return false, why
			}
		}
	case *route.HeaderMatcher_ExactMatch:
		ok = present && v == spec.ExactMatch
	case *route.HeaderMatcher_PrefixMatch:
		ok = present && strings.HasPrefix(v, spec.PrefixMatch)
	case *route.HeaderMatcher_SuffixMatch:
		ok = present && strings.HasSuffix(v, spec.SuffixMatch)
	case *route.HeaderMatcher_ContainsMatch:
		ok = present && strings.Contains(v, spec.ContainsMatch)
	case nil:
		ok = present // no specifier: the header must be present
	default:
		return false, fmt.Sprintf("header matcher %T", spec)
	}
	return ok != hm.GetInvertMatch(), ""
}

// stringMatches is StringMatcher; ignore_case applies to every form but
// safe_regex.
func stringMatches(sm *matcher.StringMatcher, v string) (bool, string) {
	fold := func(s string) string {
		if sm.GetIgnoreCase() {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcher.StringMatcher_Exact:
		return fold(v) == fold(p.Exact), ""
	case *matcher.StringMatcher_Prefix:
		return strings.HasPrefix(fold(v), fold(p.Prefix)), ""
	case *matcher.StringMatcher_Suffix:
		return strings.HasSuffix(fold(v), fold(p.Suffix)), ""
	case *matcher.StringMatcher_Contains:
		return strings.Contains(fold(v), fold(p.Contains)), ""
	case *matcher.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return false, err.Error()
		}
		return re.MatchString(v), ""
	}
	return false, fmt.Sprintf("string matcher %T", sm.GetMatchPattern())
}

// runRouteAction follows the matched route's action to its cluster(s).
func (s *Simulation) runRouteAction(res Result, r *route.Route, headers map[string]string, req Request) Result {
	action := r.GetRoute()
	if action == nil {
		return stop(res, OutcomeUnsupported, fmt.Sprintf("route %q is not a forwarding route (%T)", r.GetName(), r.GetAction()))
	}
	res.HashPolicy = describeHashPolicies(action.GetHashPolicy())
	if literal := action.GetHostRewriteLiteral(); literal != "" {
		res.Authority = literal
	} else if action.GetHostRewriteSpecifier() != nil {
		res.Authority = ""
	}
	switch c := action.GetClusterSpecifier().(type) {
	case *route.RouteAction_Cluster:
		return s.toCluster(res, c.Cluster, req)
	case *route.RouteAction_ClusterHeader:
		name := headers[strings.ToLower(c.ClusterHeader)]
		if name == "" {
			return stop(res, OutcomeNoCluster, fmt.Sprintf("cluster header %s is missing", c.ClusterHeader))
		}
		return s.toCluster(res, name, req)
	case *route.RouteAction_WeightedClusters:
		for _, wc := range c.WeightedClusters.GetClusters() {
			res.Weighted = append(res.Weighted, WeightedCluster{Name: wc.GetName(), Weight: wc.GetWeight().GetValue()})
		}
		return stop(res, OutcomeWeighted, "resolve each with Simulation.Cluster")
	}
	return stop(res, OutcomeUnsupported, fmt.Sprintf("cluster specifier %T", action.GetClusterSpecifier()))
}

func describeHashPolicies(policies []*route.RouteAction_HashPolicy) []string {
	var out []string
	for _, p := range policies {
		switch {
		case p.GetHeader() != nil:
			out = append(out, "header:"+p.GetHeader().GetHeaderName())
		case p.GetCookie() != nil:
			out = append(out, "cookie:"+p.GetCookie().GetName())
		case p.GetQueryParameter() != nil:
			out = append(out, "query_parameter:"+p.GetQueryParameter().GetName())
		case p.GetConnectionProperties().GetSourceIp():
			out = append(out, "source_ip")
		default:
			out = append(out, fmt.Sprintf("%T", p.GetPolicySpecifier()))
		}
	}
	return out
}
