package validation

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	networking "istio.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// meshGateway names the sidecars (and other mesh proxies) in a gateways
// list, as opposed to Gateway objects.
const meshGateway = "mesh"

const (
	// maxRegexLength approximates Envoy's RE2 program-size limit, which
	// is always larger than the pattern's length; Istio refuses longer
	// patterns so that Envoy never rejects the route.
	maxRegexLength = 1024
	// maxDirectResponseBody is the largest inline body Istio accepts; every
	// proxy holds it in its route configuration.
	maxDirectResponseBody = 1 << 20
)

// retryOnPolicies are the conditions Envoy's x-envoy-retry-on and
// x-envoy-retry-grpc-on understand; retryOn may also list status codes.
var retryOnPolicies = []string{
	"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "retriable-4xx",
	"refused-stream", "retriable-status-codes", "retriable-headers", "envoy-ratelimited",
	"http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
}

// corsMethods are the methods a CORS policy may allow.
var corsMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// grpcStatuses are the gRPC status names an abort fault may return.
var grpcStatuses = []string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
	"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// headerNamePattern is an HTTP field name: one or more RFC 7230 tchars.
var headerNamePattern = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")

// pseudoHeaders may be matched on although they are not field names.
var pseudoHeaders = []string{":method", ":authority", ":path", ":scheme", ":status"}

// jwtClaimPrefix marks a header match that is really a JWT claim match,
// which only gateways can evaluate.
const jwtClaimPrefix = "@request.auth.claims"

// ValidateVirtualService returns every problem with a VirtualService
// (networking.istio.io v1, v1beta1 or v1alpha3, which share this spec), or
// nil. name and namespace are the object's metadata.
//
// The rules are Istio's, with one difference: hosts are required. Istio
// reads a VirtualService without hosts as the target of a delegating
// route, and meshpilot serves no delegation (a route that delegates is
// valid, and reported as not served when routes are built).
func ValidateVirtualService(name, namespace string, vs *networking.VirtualService) error {
	var p problems
	p.objectMeta(name, namespace)
	if vs == nil {
		p.add("spec", "is required")
		return p.err()
	}
	appliesToMesh := len(vs.GetGateways()) == 0 || slices.Contains(vs.GetGateways(), meshGateway)
	p.gatewayNames("spec.gateways", vs.GetGateways())
	p.virtualHosts(vs.GetHosts(), appliesToMesh)
	for _, msg := range ValidateExportTo(vs.GetExportTo()) {
		p.add("spec.exportTo", "%s", msg)
	}
	if len(vs.GetHttp()) == 0 && len(vs.GetTcp()) == 0 && len(vs.GetTls()) == 0 {
		p.add("spec", "at least one http, tcp or tls route is required")
	}
	// JWT claims exist only where a gateway authenticated the request.
	onlyGateways := !appliesToMesh
	for i, r := range vs.GetHttp() {
		p.httpRoute(fmt.Sprintf("spec.http[%d]", i), r, onlyGateways)
	}
	for i, r := range vs.GetTls() {
		p.tlsRoute(fmt.Sprintf("spec.tls[%d]", i), r, vs.GetHosts())
	}
	for i, r := range vs.GetTcp() {
		p.tcpRoute(fmt.Sprintf("spec.tcp[%d]", i), r)
	}
	return p.err()
}

// virtualHosts checks the hosts a VirtualService answers for: DNS names
// (short, fully qualified, or with a leading wildcard label) or IP
// addresses, no two of which overlap.
func (p *problems) virtualHosts(hosts []string, appliesToMesh bool) {
	const path = "spec.hosts"
	if len(hosts) == 0 {
		p.add(path, "at least one host is required")
		return
	}
	allValid := true
	for i, h := range hosts {
		hPath := fmt.Sprintf("%s[%d]", path, i)
		if h == "*" && appliesToMesh {
			// Every sidecar would send all its traffic here.
			p.add(hPath, `"*" is not allowed for a VirtualService that applies to the mesh`)
			allValid = false
			continue
		}
		if _, err := netip.ParseAddr(h); err == nil {
			continue
		}
		if msgs := ValidateHost(h); len(msgs) > 0 {
			for _, msg := range msgs {
				p.add(hPath, "%s", msg)
			}
			allValid = false
		}
	}
	if !allValid {
		return
	}
	for i := range hosts {
		for j := i + 1; j < len(hosts); j++ {
			if hostsOverlap(hosts[i], hosts[j]) {
				p.add(fmt.Sprintf("%s[%d]", path, j), "%q overlaps %q (hosts[%d])", hosts[j], hosts[i], i)
			}
		}
	}
}

// hostsOverlap reports whether some name matches both a and b, each a
// name or a wildcard ("*" or "*.suffix").
func hostsOverlap(a, b string) bool {
	return covers(a, b) || covers(b, a)
}

func covers(wild, h string) bool {
	switch {
	case wild == h, wild == "*":
		return true
	case strings.HasPrefix(wild, "*."):
		return strings.HasSuffix(h, wild[1:])
	}
	return false
}

// gatewayNames checks a gateways list: "mesh", "namespace/name", or (the
// older form) a gateway's name, short or qualified.
func (p *problems) gatewayNames(path string, gateways []string) {
	for i, g := range gateways {
		gPath := fmt.Sprintf("%s[%d]", path, i)
		if g == meshGateway {
			continue
		}
		ns, name, qualified := strings.Cut(g, "/")
		if !qualified {
			if strings.Contains(g, "*") {
				p.add(gPath, "%q: a gateway is named, not matched by a wildcard", g)
				continue
			}
			for _, msg := range ValidateHost(g) {
				p.add(gPath, "%s", msg)
			}
			continue
		}
		if ns == "" || name == "" {
			p.add(gPath, "namespace and name of %q must both be set", g)
			continue
		}
		for _, msg := range validation.IsDNS1123Label(ns) {
			p.add(gPath, "namespace %q: %s", ns, msg)
		}
		for _, msg := range validation.IsDNS1123Label(name) {
			p.add(gPath, "name %q: %s", name, msg)
		}
	}
}

func (p *problems) httpRoute(path string, r *networking.HTTPRoute, onlyGateways bool) {
	if r == nil {
		p.add(path, "must not be null")
		return
	}
	p.httpActions(path, r)
	for i, m := range r.GetMatch() {
		p.httpMatch(fmt.Sprintf("%s.match[%d]", path, i), m, onlyGateways)
	}
	p.headerOperations(path+".headers", r.GetHeaders())
	if r.GetRewrite().GetAuthority() != "" {
		for _, op := range []map[string]string{r.GetHeaders().GetRequest().GetSet(), r.GetHeaders().GetRequest().GetAdd()} {
			for _, k := range sortedKeys(op) {
				if isAuthorityHeader(k) {
					p.add(path+".headers.request", "%q is set while rewrite.authority also sets the authority: set it in one place", k)
				}
			}
		}
	}
	p.httpDestinations(path+".route", r.GetRoute())
	p.checkMillis(path+".timeout", r.GetTimeout())
	p.retries(path+".retries", r.GetRetries())
	p.fault(path+".fault", r.GetFault())
	p.cors(path+".corsPolicy", r.GetCorsPolicy())
	if r.GetMirror() != nil {
		p.destination(path+".mirror", r.GetMirror())
	}
	//lint:ignore SA1019 users may still set the deprecated field; it is validated like the rest
	if mp := r.GetMirrorPercent(); mp != nil && mp.GetValue() > 100 {
		p.add(path+".mirrorPercent", "must be at most 100, got %d", mp.GetValue())
	}
	if mp := r.GetMirrorPercentage(); mp != nil {
		p.checkPercent(path+".mirrorPercentage.value", mp.GetValue())
	}
	for i, m := range r.GetMirrors() {
		mPath := fmt.Sprintf("%s.mirrors[%d]", path, i)
		if m.GetDestination() == nil {
			p.add(mPath+".destination", "is required")
		} else {
			p.destination(mPath+".destination", m.GetDestination())
		}
		if m.GetPercentage() != nil {
			p.checkPercent(mPath+".percentage.value", m.GetPercentage().GetValue())
		}
	}
}

// httpActions checks what a route does with a request: forward it (route),
// redirect it or answer it (directResponse), exactly one of them, and only
// the options that make sense for that action.
func (p *problems) httpActions(path string, r *networking.HTTPRoute) {
	var actions []string
	if len(r.GetRoute()) > 0 {
		actions = append(actions, "route")
	}
	if r.GetRedirect() != nil {
		actions = append(actions, "redirect")
	}
	if r.GetDirectResponse() != nil {
		actions = append(actions, "directResponse")
	}
	if d := r.GetDelegate(); d != nil {
		// A route handed to another VirtualService does nothing itself.
		actions = append(actions, "delegate")
		if d.GetName() == "" {
			p.add(path+".delegate.name", "is required")
		} else {
			for _, msg := range validation.IsDNS1123Subdomain(d.GetName()) {
				p.add(path+".delegate.name", "%s", msg)
			}
		}
		p.sourceNamespace(path+".delegate.namespace", d.GetNamespace())
	}
	switch {
	case len(actions) == 0:
		p.add(path, "one of route, redirect, directResponse or delegate is required")
	case len(actions) > 1:
		p.add(path, "%s are mutually exclusive", strings.Join(actions, " and "))
	}
	if r.GetRedirect() == nil && r.GetDirectResponse() == nil {
		p.rewrite(path+".rewrite", r.GetRewrite())
	}
	for _, answered := range []struct {
		set  bool
		name string
	}{{r.GetRedirect() != nil, "redirect"}, {r.GetDirectResponse() != nil, "directResponse"}} {
		if !answered.set {
			continue
		}
		// Nothing is forwarded, so there is nothing to rewrite or delay.
		if r.GetRewrite() != nil {
			p.add(path+".rewrite", "cannot be combined with %s", answered.name)
		}
		if r.GetFault() != nil {
			p.add(path+".fault", "cannot be combined with %s", answered.name)
		}
	}
	p.redirect(path+".redirect", r.GetRedirect())
	p.directResponse(path+".directResponse", r.GetDirectResponse())
}

func (p *problems) httpMatch(path string, m *networking.HTTPMatchRequest, onlyGateways bool) {
	if m == nil {
		p.add(path, "must not be null")
		return
	}
	p.stringMatch(path+".uri", m.GetUri())
	p.stringMatch(path+".scheme", m.GetScheme())
	p.stringMatch(path+".method", m.GetMethod())
	p.stringMatch(path+".authority", m.GetAuthority())
	for _, field := range []struct {
		name    string
		matches map[string]*networking.StringMatch
	}{{"headers", m.GetHeaders()}, {"withoutHeaders", m.GetWithoutHeaders()}} {
		for _, k := range sortedKeys(field.matches) {
			kPath := path + "." + field.name + "[" + k + "]"
			if strings.HasPrefix(k, jwtClaimPrefix) {
				if !onlyGateways {
					p.add(kPath, "JWT claim routing works only on gateways, and this VirtualService applies to the mesh")
				}
			} else {
				p.headerName(kPath, k)
			}
			// {} matches when the header is present, so an empty match is fine.
			p.stringMatch(kPath, field.matches[k])
		}
	}
	for _, k := range sortedKeys(m.GetQueryParams()) {
		kPath := path + ".queryParams[" + k + "]"
		if k == "" {
			p.add(kPath, "query parameter name must not be empty")
		}
		p.stringMatch(kPath, m.GetQueryParams()[k])
	}
	if m.GetPort() != 0 {
		p.checkPort(path+".port", m.GetPort())
	}
	p.labels(path+".sourceLabels", m.GetSourceLabels())
	p.gatewayNames(path+".gateways", m.GetGateways())
	p.sourceNamespace(path+".sourceNamespace", m.GetSourceNamespace())
}

// stringMatch checks a regex match: RE2 syntax (what Envoy runs), not
// empty and not too long. Exact and prefix matches take any string.
func (p *problems) stringMatch(path string, sm *networking.StringMatch) {
	if re, ok := sm.GetMatchType().(*networking.StringMatch_Regex); ok {
		p.regex(path+".regex", re.Regex)
	}
}

func (p *problems) regex(path, re string) {
	switch {
	case re == "":
		p.add(path, "must not be empty")
	case len(re) > maxRegexLength:
		p.add(path, "longer than %d characters", maxRegexLength)
	default:
		// Go's regexp implements RE2's syntax, which is what Envoy runs.
		if _, err := regexp.Compile(re); err != nil {
			p.add(path, "not an RE2 regular expression: %v", err)
		}
	}
}

func (p *problems) headerName(path, name string) {
	switch {
	case name == "":
		p.add(path, "header name must not be empty")
	case slices.Contains(pseudoHeaders, name):
	case !headerNamePattern.MatchString(name):
		p.add(path, "%q is not a valid HTTP header name", name)
	}
}

func (p *problems) sourceNamespace(path, ns string) {
	if ns == "" {
		return
	}
	for _, msg := range validation.IsDNS1123Label(ns) {
		p.add(path, "%s", msg)
	}
}

// headerOperations checks header changes. Envoy owns the pseudo-headers
// and Host, except that a request's authority may be set (it is how a
// route picks the Host its upstream sees).
func (p *problems) headerOperations(path string, h *networking.Headers) {
	if h == nil {
		return
	}
	for _, dir := range []struct {
		name string
		ops  *networking.Headers_HeaderOperations
		// authority: may set and add name the authority?
		authority bool
	}{{"request", h.GetRequest(), true}, {"response", h.GetResponse(), false}} {
		dPath := path + "." + dir.name
		for _, op := range []struct {
			name   string
			values map[string]string
		}{{"set", dir.ops.GetSet()}, {"add", dir.ops.GetAdd()}} {
			for _, k := range sortedKeys(op.values) {
				kPath := dPath + "." + op.name + "[" + k + "]"
				p.modifiedHeader(kPath, k, dir.authority)
				p.headerValue(kPath, op.values[k])
			}
		}
		for i, k := range dir.ops.GetRemove() {
			p.modifiedHeader(fmt.Sprintf("%s.remove[%d]", dPath, i), k, false)
		}
	}
}

func (p *problems) modifiedHeader(path, name string, authorityAllowed bool) {
	switch {
	case name == "":
		p.add(path, "header name must not be empty")
	case isAuthorityHeader(name) && authorityAllowed:
	case strings.EqualFold(name, "host"):
		p.add(path, "the Host header cannot be changed here")
	case strings.HasPrefix(name, ":"):
		p.add(path, "pseudo-header %q cannot be changed", name)
	}
}

// headerValue checks a header value as Envoy reads it: %VARIABLE%
// substitutions come in pairs of percent signs (a literal one is %%), and
// control characters other than tab are not allowed.
func (p *problems) headerValue(path, v string) {
	if strings.Count(v, "%")%2 != 0 {
		p.add(path, "a single %% is not allowed: write %%%% for a literal one, or %%VARIABLE%%")
	}
	if strings.ContainsFunc(v, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
		p.add(path, "control characters are not allowed in a header value")
	}
}

func isAuthorityHeader(name string) bool {
	return strings.EqualFold(name, ":authority") || strings.EqualFold(name, "host")
}

func (p *problems) httpDestinations(path string, ds []*networking.HTTPRouteDestination) {
	var total int64
	for i, d := range ds {
		dPath := fmt.Sprintf("%s[%d]", path, i)
		if d == nil {
			p.add(dPath, "must not be null")
			continue
		}
		if d.GetDestination() == nil {
			p.add(dPath+".destination", "is required")
		} else {
			p.destination(dPath+".destination", d.GetDestination())
		}
		p.checkNonNegative(dPath+".weight", d.GetWeight())
		total += int64(max(d.GetWeight(), 0))
		p.headerOperations(dPath+".headers", d.GetHeaders())
	}
	p.totalWeight(path, len(ds), total)
}

func (p *problems) routeDestinations(path string, ds []*networking.RouteDestination) {
	if len(ds) == 0 {
		p.add(path, "at least one destination is required")
		return
	}
	var total int64
	for i, d := range ds {
		dPath := fmt.Sprintf("%s[%d]", path, i)
		if d == nil {
			p.add(dPath, "must not be null")
			continue
		}
		if d.GetDestination() == nil {
			p.add(dPath+".destination", "is required")
		} else {
			p.destination(dPath+".destination", d.GetDestination())
		}
		p.checkNonNegative(dPath+".weight", d.GetWeight())
		total += int64(max(d.GetWeight(), 0))
	}
	p.totalWeight(path, len(ds), total)
}

// totalWeight checks that traffic split between destinations goes
// somewhere. Weights are relative: a lone destination takes everything
// whatever its weight, but several must not all weigh zero.
func (p *problems) totalWeight(path string, n int, total int64) {
	if n > 1 && total == 0 {
		p.add(path, "the weights of %d destinations add up to 0: at least one must be positive", n)
	}
}

func (p *problems) destination(path string, d *networking.Destination) {
	switch h := d.GetHost(); {
	case h == "":
		p.add(path+".host", "is required")
	case h == "*":
		p.add(path+".host", `"*" is not a destination`)
	default:
		for _, msg := range ValidateHost(h) {
			p.add(path+".host", "%s", msg)
		}
	}
	if s := d.GetSubset(); s != "" {
		for _, msg := range validation.IsDNS1123Label(s) {
			p.add(path+".subset", "%s", msg)
		}
	}
	if d.GetPort() != nil {
		p.checkPort(path+".port.number", d.GetPort().GetNumber())
	}
}

func (p *problems) redirect(path string, r *networking.HTTPRedirect) {
	if r == nil {
		return
	}
	if r.GetUri() == "" && r.GetAuthority() == "" && r.GetScheme() == "" && r.GetPrefixRewrite() == "" &&
		r.GetRedirectPort() == nil {
		p.add(path, "must set at least one of uri, prefixRewrite, authority, scheme, port or derivePort")
	}
	if r.GetUri() != "" && r.GetPrefixRewrite() != "" {
		p.add(path, "uri and prefixRewrite are mutually exclusive")
	}
	if c := r.GetRedirectCode(); c != 0 && (c < 300 || c > 399) {
		p.add(path+".redirectCode", "must be a 3xx status, got %d", c)
	}
	if s := r.GetScheme(); s != "" && s != "http" && s != "https" {
		p.add(path+".scheme", `must be "http" or "https", got %q`, s)
	}
	if port, ok := r.GetRedirectPort().(*networking.HTTPRedirect_Port); ok {
		p.checkPort(path+".port", port.Port)
	}
}

func (p *problems) directResponse(path string, d *networking.HTTPDirectResponse) {
	if d == nil {
		return
	}
	p.httpStatus(path+".status", int64(d.GetStatus()))
	if b := d.GetBody(); b != nil {
		if size := len(b.GetString_()) + len(b.GetBytes()); size > maxDirectResponseBody {
			p.add(path+".body", "must be at most 1 MiB, got %d bytes", size)
		}
	}
}

func (p *problems) httpStatus(path string, status int64) {
	if status < 200 || status > 599 {
		p.add(path, "must be an HTTP status in 200..599, got %d", status)
	}
}

func (p *problems) rewrite(path string, r *networking.HTTPRewrite) {
	if r == nil {
		return
	}
	re := r.GetUriRegexRewrite()
	if r.GetUri() != "" && re != nil {
		p.add(path, "uri and uriRegexRewrite are mutually exclusive")
	}
	if r.GetUri() == "" && re == nil && r.GetAuthority() == "" {
		p.add(path, "must set uri, uriRegexRewrite or authority")
	}
	if re != nil {
		if re.GetRewrite() == "" {
			p.add(path+".uriRegexRewrite.rewrite", "is required")
		}
		p.regex(path+".uriRegexRewrite.match", re.GetMatch())
	}
}

func (p *problems) retries(path string, r *networking.HTTPRetry) {
	if r == nil {
		return
	}
	p.checkNonNegative(path+".attempts", r.GetAttempts())
	if r.GetAttempts() == 0 && (r.GetPerTryTimeout() != nil || r.GetRetryOn() != "" || r.GetRetryRemoteLocalities() != nil) {
		p.add(path, "attempts is 0 (retries disabled), so perTryTimeout, retryOn and retryRemoteLocalities have no effect: remove them or set attempts")
	}
	p.checkMillis(path+".perTryTimeout", r.GetPerTryTimeout())
	p.checkMillis(path+".backoff", r.GetBackoff())
	if r.GetRetryOn() == "" {
		return
	}
	for cond := range strings.SplitSeq(r.GetRetryOn(), ",") {
		if slices.Contains(retryOnPolicies, cond) {
			continue
		}
		if code, err := strconv.Atoi(cond); err == nil && http.StatusText(code) != "" {
			continue
		}
		p.add(path+".retryOn", "%q is neither a retry condition nor an HTTP status code", cond)
	}
}

func (p *problems) fault(path string, f *networking.HTTPFaultInjection) {
	if f == nil {
		return
	}
	if f.GetAbort() == nil && f.GetDelay() == nil {
		p.add(path, "must set abort, delay or both")
	}
	if d := f.GetDelay(); d != nil {
		if d.GetPercentage() != nil {
			p.checkPercent(path+".delay.percentage.value", d.GetPercentage().GetValue())
		}
		//lint:ignore SA1019 users may still set the deprecated field; it is validated like the rest
		p.checkPercent(path+".delay.percent", float64(d.GetPercent()))
		switch t := d.GetHttpDelayType().(type) {
		case nil:
			p.add(path+".delay.fixedDelay", "is required")
		case *networking.HTTPFaultInjection_Delay_FixedDelay:
			p.checkMillis(path+".delay.fixedDelay", t.FixedDelay)
		case *networking.HTTPFaultInjection_Delay_ExponentialDelay:
			p.add(path+".delay.exponentialDelay", "is not supported: use fixedDelay")
		}
	}
	if a := f.GetAbort(); a != nil {
		if a.GetPercentage() != nil {
			p.checkPercent(path+".abort.percentage.value", a.GetPercentage().GetValue())
		}
		switch t := a.GetErrorType().(type) {
		case nil:
			p.add(path+".abort", "must set httpStatus or grpcStatus")
		case *networking.HTTPFaultInjection_Abort_HttpStatus:
			p.httpStatus(path+".abort.httpStatus", int64(t.HttpStatus))
		case *networking.HTTPFaultInjection_Abort_GrpcStatus:
			if !slices.Contains(grpcStatuses, t.GrpcStatus) {
				p.add(path+".abort.grpcStatus", "%q is not a gRPC status name (such as UNAVAILABLE)", t.GrpcStatus)
			}
		case *networking.HTTPFaultInjection_Abort_Http2Error:
			p.add(path+".abort.http2Error", "is not supported: use httpStatus or grpcStatus")
		}
	}
}

func (p *problems) cors(path string, c *networking.CorsPolicy) {
	if c == nil {
		return
	}
	for i, o := range c.GetAllowOrigins() {
		oPath := fmt.Sprintf("%s.allowOrigins[%d]", path, i)
		if o.GetExact() == "" && o.GetPrefix() == "" && o.GetRegex() == "" {
			p.add(oPath, "must set a non-empty exact, prefix or regex")
			continue
		}
		p.stringMatch(oPath, o)
	}
	for i, m := range c.GetAllowMethods() {
		if !slices.Contains(corsMethods, m) {
			p.add(fmt.Sprintf("%s.allowMethods[%d]", path, i), "%q is not an HTTP method", m)
		}
	}
	for _, field := range []struct {
		name  string
		names []string
	}{{"allowHeaders", c.GetAllowHeaders()}, {"exposeHeaders", c.GetExposeHeaders()}} {
		for i, h := range field.names {
			if h == "*" {
				continue
			}
			p.headerName(fmt.Sprintf("%s.%s[%d]", path, field.name, i), h)
		}
	}
	if age := c.GetMaxAge(); age != nil {
		p.checkMillis(path+".maxAge", age)
		if age.GetNanos() != 0 {
			p.add(path+".maxAge", "must be whole seconds (Access-Control-Max-Age counts seconds)")
		}
	}
}

func (p *problems) tlsRoute(path string, r *networking.TLSRoute, hosts []string) {
	if r == nil {
		p.add(path, "must not be null")
		return
	}
	if len(r.GetMatch()) == 0 {
		p.add(path+".match", "at least one match is required (TLS is routed by SNI)")
	}
	for i, m := range r.GetMatch() {
		mPath := fmt.Sprintf("%s.match[%d]", path, i)
		if m == nil {
			p.add(mPath, "must not be null")
			continue
		}
		if len(m.GetSniHosts()) == 0 {
			p.add(mPath+".sniHosts", "at least one SNI host is required")
		}
		for j, sni := range m.GetSniHosts() {
			p.sniHost(fmt.Sprintf("%s.sniHosts[%d]", mPath, j), sni, hosts)
		}
		p.subnets(mPath+".destinationSubnets", m.GetDestinationSubnets())
		if m.GetPort() != 0 {
			p.checkPort(mPath+".port", m.GetPort())
		}
		p.labels(mPath+".sourceLabels", m.GetSourceLabels())
		p.gatewayNames(mPath+".gateways", m.GetGateways())
		p.sourceNamespace(mPath+".sourceNamespace", m.GetSourceNamespace())
	}
	p.routeDestinations(path+".route", r.GetRoute())
}

// sniHost checks an SNI name, which must fall within one of the
// VirtualService's hosts: the route is only reached for those.
func (p *problems) sniHost(path, sni string, hosts []string) {
	if msgs := ValidateHost(sni); len(msgs) > 0 {
		for _, msg := range msgs {
			p.add(path, "%s", msg)
		}
		return
	}
	if !slices.ContainsFunc(hosts, func(h string) bool { return covers(h, sni) }) {
		p.add(path, "%q is not within any of the hosts [%s]", sni, strings.Join(hosts, ", "))
	}
}

func (p *problems) tcpRoute(path string, r *networking.TCPRoute) {
	if r == nil {
		p.add(path, "must not be null")
		return
	}
	for i, m := range r.GetMatch() {
		mPath := fmt.Sprintf("%s.match[%d]", path, i)
		if m == nil {
			p.add(mPath, "must not be null")
			continue
		}
		p.subnets(mPath+".destinationSubnets", m.GetDestinationSubnets())
		if s := m.GetSourceSubnet(); s != "" {
			p.subnet(mPath+".sourceSubnet", s)
		}
		if m.GetPort() != 0 {
			p.checkPort(mPath+".port", m.GetPort())
		}
		p.labels(mPath+".sourceLabels", m.GetSourceLabels())
		p.gatewayNames(mPath+".gateways", m.GetGateways())
		p.sourceNamespace(mPath+".sourceNamespace", m.GetSourceNamespace())
	}
	p.routeDestinations(path+".route", r.GetRoute())
}

func (p *problems) subnets(path string, subnets []string) {
	for i, s := range subnets {
		p.subnet(fmt.Sprintf("%s[%d]", path, i), s)
	}
}

// checkMillis checks a duration Envoy takes in milliseconds: at least one,
// and whole ones, since finer digits would be dropped without a word.
func (p *problems) checkMillis(path string, d *durationpb.Duration) {
	if d == nil || d.CheckValid() != nil || d.AsDuration() < minDuration {
		p.checkDuration(path, d)
		return
	}
	if d.AsDuration()%time.Millisecond != 0 {
		p.add(path, "must be whole milliseconds, got %v", d.AsDuration())
	}
}

// subnet checks an IP address or a CIDR block.
func (p *problems) subnet(path, s string) {
	if _, err := netip.ParseAddr(s); err == nil {
		return
	}
	if _, _, err := net.ParseCIDR(s); err != nil {
		p.add(path, "%q is neither an IP address nor a CIDR block", s)
	}
}
