package grpcgen

import (
	"sort"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// visibleService returns the service named host if namespace ns may see it.
// It searches the push context's own visibility index so that every
// generator agrees with it on what a namespace sees.
func visibleService(push *pushcontext.PushContext, ns, host string) *model.Service {
	visible := push.ServicesVisibleTo(ns)
	i := sort.Search(len(visible), func(i int) bool { return visible[i].Hostname >= host })
	if i < len(visible) && visible[i].Hostname == host {
		return visible[i]
	}
	return nil
}

// resolveTarget resolves the authority of a gRPC target ("host:port") to a
// service port visible from namespace ns. host may be the service's FQDN or
// a Kubernetes short form relative to ns: "name", "name.ns", "name.ns.svc".
func resolveTarget(push *pushcontext.PushContext, domainSuffix, ns, target string) (*model.Service, *model.Port) {
	host, port, ok := splitHostPort(target)
	if !ok {
		return nil, nil
	}
	svc := visibleService(push, ns, host)
	if svc == nil {
		if fqdn := expandShortName(host, ns, domainSuffix); fqdn != "" {
			svc = visibleService(push, ns, fqdn)
		}
	}
	if svc == nil {
		return nil, nil
	}
	svc = servedAs(push, ns, svc)
	p := svc.PortByNumber(port)
	if p == nil {
		return nil, nil
	}
	return svc, p
}

// servedAs is the Service whose listener, routes and clusters serve svc's
// clients in namespace ns: the Service an alias names (an ExternalName
// Service whose CNAME leads to it), else svc. An alias's clients dial its
// name, and get the target's routes and clusters on the target's ports,
// with mutual TLS where the target has it, as Envoy sidecars do.
func servedAs(push *pushcontext.PushContext, ns string, svc *model.Service) *model.Service {
	if target := push.AliasTarget(ns, svc); target != nil {
		return target
	}
	return svc
}

// expandShortName turns a short service name into its FQDN, or "" when host
// is not a short form.
func expandShortName(host, ns, domainSuffix string) string {
	switch strings.Count(host, ".") {
	case 0:
		if ns == "" {
			return ""
		}
		return host + "." + ns + ".svc." + domainSuffix
	case 1:
		return host + ".svc." + domainSuffix
	case 2:
		if strings.HasSuffix(host, ".svc") {
			return host + "." + domainSuffix
		}
	}
	return ""
}

// authorities lists the host forms a gRPC client in namespace ns may use to
// reach svc: the FQDN, "name.ns.svc", "name.ns", and "name" from the
// service's own namespace. Each is listed with and without the port.
func authorities(svc *model.Service, port uint32, ns string) []string {
	hosts := make([]string, 0, 4)
	hosts = append(hosts, svc.Hostname)
	short := svc.Name + "." + svc.Namespace
	if strings.HasPrefix(svc.Hostname, short+".svc.") {
		hosts = append(hosts, short+".svc", short)
		if ns == svc.Namespace {
			hosts = append(hosts, svc.Name)
		}
	}
	out := make([]string, 0, 2*len(hosts))
	for _, h := range hosts {
		out = append(out, hostPort(h, port), h)
	}
	return out
}
