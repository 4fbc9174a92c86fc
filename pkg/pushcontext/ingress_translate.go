package pushcontext

import (
	"slices"
	"strconv"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// anyHost is the virtual host of rules that name no host.
const anyHost = "*"

// ingressTranslation is one Ingress turned into routes and TLS entries,
// before it is merged with the other Ingresses. It is immutable once made and
// is carried from snapshot to snapshot while its inputs stay the same.
type ingressTranslation struct {
	ingress *model.Ingress
	key     model.NamespacedName
	// routes are the rule routes in spec order.
	routes []hostRoute
	// fallback is the defaultBackend's "/" prefix route, nil without one.
	fallback *IngressRoute
	// hosts are the rule hosts ("*" for none), deduplicated, in spec order.
	hosts []string
	// tls are the spec.tls entries whose Secret is usable.
	tls      []tlsCandidate
	problems []string
	// services and secrets are what the translation read, with what it
	// found (nil when missing), so a later build can tell whether it still
	// holds.
	services []serviceDep
	secrets  []secretDep
	// aliasReads are the hostnames that resolving ExternalName backends
	// looked up: a Service appearing, changing or going at one of them may
	// make a backend an alias, or change what it is an alias of.
	aliasReads []string
}

type hostRoute struct {
	host  string
	route *IngressRoute
}

type tlsCandidate struct {
	hosts  []string // sorted, deduplicated
	secret model.NamespacedName
}

type serviceDep struct {
	name model.NamespacedName
	svc  *model.Service
	// target is the Service that svc was an alias of for the gateway, nil
	// when it was none.
	target *model.Service
}

type secretDep struct {
	name   model.NamespacedName
	secret *model.Secret
}

// ingressTranslator holds what translating one Ingress looks up.
type ingressTranslator struct {
	services *serviceIndex
	secrets  *secretChecker
	// gatewayNamespace is where the gateway runs: an alias backend is
	// routed to its target only if that namespace sees the target, as the
	// gateway's clusters follow what it sees.
	gatewayNamespace string
}

func (tr *ingressTranslator) translate(ing *model.Ingress) *ingressTranslation {
	t := &ingressTranslation{ingress: ing, key: ing.Key()}
	if ing.DefaultBackend != nil {
		t.fallback = tr.backendRoute(t, ing.DefaultBackend, model.PathTypePrefix, "/", routeSite{fallback: true})
	}
	paths := 0
	for _, rule := range ing.Rules {
		paths += len(rule.Paths)
	}
	t.routes = make([]hostRoute, 0, paths)
	for _, rule := range ing.Rules {
		// Host names are case-insensitive, and Envoy refuses two virtual
		// hosts whose domains differ only in case: the one spelling merges
		// them. The API server takes lower case only; files take any.
		host := strings.ToLower(rule.Host)
		if host == "" {
			host = anyHost
		}
		if !containsString(t.hosts, host) {
			t.hosts = append(t.hosts, host)
		}
		for _, p := range rule.Paths {
			site := routeSite{host: host, path: p.Path}
			pathType, path, problem := normalizePath(p.PathType, p.Path)
			if problem != "" {
				t.problems = append(t.problems, site.String()+": "+problem+"; dropped")
				continue
			}
			if r := tr.backendRoute(t, &p.Backend, pathType, path, site); r != nil {
				t.routes = append(t.routes, hostRoute{host: host, route: r})
			}
		}
	}
	tr.translateTLS(t)
	slices.Sort(t.problems)
	t.problems = slices.Compact(t.problems)
	return t
}

// backendRoute resolves a backend to a route, or records why it cannot.
func (tr *ingressTranslator) backendRoute(t *ingressTranslation, b *model.IngressBackend, pathType model.PathType, path string, site routeSite) *IngressRoute {
	if b.Resource != "" {
		t.problems = append(t.problems, site.String()+": resource backends ("+b.Resource+") are not supported; dropped")
		return nil
	}
	if b.ServiceName == "" {
		t.problems = append(t.problems, site.String()+": backend names no service; dropped")
		return nil
	}
	name := model.NamespacedName{Namespace: t.key.Namespace, Name: b.ServiceName}
	var svc, target *model.Service
	if i, ok := tr.services.byName[name]; ok {
		svc = tr.services.all[i]
		target = tr.aliasTarget(t, svc)
	}
	t.addServiceDep(serviceDep{name: name, svc: svc, target: target})
	if svc == nil {
		t.problems = append(t.problems, site.String()+": backend service "+name.String()+" not found; dropped")
		return nil
	}
	// An alias is routed as cluster DNS routes it: to the same port number
	// of its target. Its own ports only turn a port name into a number.
	var number uint32
	switch {
	case b.PortName != "":
		p := svc.PortByName(b.PortName)
		if p == nil {
			t.problems = append(t.problems, site.String()+": backend service "+name.String()+" has no port named "+strconv.Quote(b.PortName)+"; dropped")
			return nil
		}
		number = p.Port
	case b.PortNumber != 0:
		if target == nil && svc.PortByNumber(b.PortNumber) == nil {
			t.problems = append(t.problems, site.String()+": backend service "+name.String()+" has no port "+strconv.FormatUint(uint64(b.PortNumber), 10)+"; dropped")
			return nil
		}
		number = b.PortNumber
	default:
		t.problems = append(t.problems, site.String()+": backend service "+name.String()+" names no port; dropped")
		return nil
	}
	if target != nil {
		if target.PortByNumber(number) == nil {
			t.problems = append(t.problems, site.String()+": backend service "+name.String()+" is an alias of "+
				target.Hostname+", which has no port "+strconv.FormatUint(uint64(number), 10)+"; dropped")
			return nil
		}
	}
	r := &IngressRoute{
		PathType: pathType,
		Path:     path,
		Host:     svc.Hostname,
		Port:     number,
		From:     t.key,
	}
	if target != nil {
		r.Host, r.Via = target.Hostname, svc.Hostname
	}
	r.Cluster = "outbound|" + strconv.FormatUint(uint64(number), 10) + "||" + r.Host
	return r
}

// aliasTarget returns the Service that the backend svc is an alias of for
// the gateway, and records what resolving it read. The gateway has no DNS
// cluster for an alias (see AliasTarget): its traffic would reach the
// target's cluster IP in plaintext, around the target's DestinationRules.
func (tr *ingressTranslator) aliasTarget(t *ingressTranslation, svc *model.Service) *model.Service {
	if !svc.IsExternalName() {
		return nil
	}
	_, read, _ := tr.services.resolveAlias(svc)
	for _, h := range read {
		if !slices.Contains(t.aliasReads, h) {
			t.aliasReads = append(t.aliasReads, h)
		}
	}
	return tr.services.aliasTarget(tr.gatewayNamespace, svc)
}

// routeSite names where in an Ingress a route comes from, for problems. The
// text is made only when there is a problem to report.
type routeSite struct {
	host, path string
	fallback   bool
}

func (s routeSite) String() string {
	if s.fallback {
		return "defaultBackend"
	}
	return "host " + strconv.Quote(s.host) + " path " + strconv.Quote(s.path)
}

func (t *ingressTranslation) addServiceDep(dep serviceDep) {
	for _, d := range t.services {
		if d.name == dep.name {
			return
		}
	}
	t.services = append(t.services, dep)
}

// normalizePath validates an Ingress path and returns how it is matched. A
// Prefix loses its trailing "/", which Kubernetes ignores for element-wise
// matching. ImplementationSpecific is read as Istio reads it (see
// implementationSpecific). The problem is "" for a valid path.
func normalizePath(pathType model.PathType, path string) (model.PathType, string, string) {
	written, invalid := pathType, notLiteralPathChar
	switch pathType {
	case model.PathTypeExact, model.PathTypePrefix:
	case model.PathTypeImplementationSpecific, "":
		written, invalid = model.PathTypeImplementationSpecific, notPathChar
		pathType, path = implementationSpecific(path)
	default:
		return "", "", "unknown pathType " + strconv.Quote(string(pathType))
	}
	if !strings.HasPrefix(path, "/") {
		return "", "", "invalid path: it must start with \"/\""
	}
	if i := strings.IndexFunc(path, invalid); i >= 0 {
		return "", "", "invalid path for pathType " + string(written) + ": " + strconv.QuoteRune(rune(path[i])) +
			" is not allowed (regular expressions, queries and fragments are not supported)"
	}
	if pathType == model.PathTypePrefix && len(path) > 1 {
		path = strings.TrimRight(path, "/")
		if path == "" {
			path = "/"
		}
	}
	return pathType, path, ""
}

// implementationSpecific reads an ImplementationSpecific path as Istio does:
// "", "*", "/*" and ".*" match every path; a path ending in ".*" or "/*" is
// a prefix of what comes before that suffix, and Istio matches its Ingress
// prefixes by path element, so "/foo/*" and "/foo.*" both match "/foo" and
// "/foo/bar" but not "/foobar"; any other path is exact.
func implementationSpecific(path string) (model.PathType, string) {
	switch path {
	case "", "*", "/*", ".*":
		return model.PathTypePrefix, "/"
	}
	for _, wildcard := range []string{".*", "/*"} {
		if prefix, ok := strings.CutSuffix(path, wildcard); ok {
			return model.PathTypePrefix, prefix
		}
	}
	return model.PathTypeExact, path
}

// notLiteralPathChar reports the characters that no request path holds as
// they are: queries, fragments, whitespace, controls, and what RFC 3986
// makes a client percent-encode. Exact and Prefix paths are matched
// literally, so the sub-delimiters a path segment may hold ("$", "(", ")",
// "*", "+" and the rest) are as valid in them as they are to the API server.
func notLiteralPathChar(r rune) bool {
	if r <= ' ' || r == 0x7f {
		return true
	}
	return strings.ContainsRune(`^?[]{}|\#`, r)
}

// notPathChar also refuses, in ImplementationSpecific paths, the characters
// that make a path look like a regular expression: other controllers read
// such paths as one, and a literal match would silently route otherwise.
func notPathChar(r rune) bool {
	return notLiteralPathChar(r) || strings.ContainsRune(`$*+()`, r)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
