package validation

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// meshGateway names the sidecars (and other mesh proxies) in a gateways
// list, as opposed to Gateway objects.
const meshGateway = "mesh"

// maxRegexLength approximates Envoy's RE2 program-size limit, which is
// always larger than the pattern's length; Istio refuses longer patterns so
// that Envoy never rejects the route.
const maxRegexLength = 1024

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
	for _, msg := range ValidateExportTo(namespace, vs.GetExportTo()) {
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
			// ValidateHost lets an address through, as hosts may be
			// one; a gateway is a name, and istiod refuses one whose last
			// label is all digits, an IPv4 address among them.
			if isIP(g) {
				p.add(gPath, "%q: a gateway is named, not an IP address", g)
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

func (p *problems) sourceNamespace(path, ns string) {
	if ns == "" {
		return
	}
	for _, msg := range validation.IsDNS1123Label(ns) {
		p.add(path, "%s", msg)
	}
}
