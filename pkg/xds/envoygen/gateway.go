package envoygen

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// The ingress gateway is a router (an Envoy at the edge) whose labels match
// the gateway selector. From the push context's ingress index it gets:
//
//   - an HTTP listener "0.0.0.0_<HTTPPort>" whose routes ("http.<HTTPPort>")
//     hold one virtual host per Ingress host;
//   - an HTTPS listener "0.0.0.0_<HTTPSPort>" with one filter chain per
//     spec.tls entry, chosen by SNI, terminating TLS with the entry's Secret
//     (fetched over SDS on the ADS stream), each with its own routes
//     ("https.<HTTPSPort>.<first host>") for the hosts it serves;
//   - the certificates of those Secrets over SDS, and nothing else.
//
// Everything here depends on the push context alone, never on which gateway
// replica asks, so it is built once per push and shared.

// gatewayChain is one HTTPS filter chain: the hosts one spec.tls entry
// serves and the certificate it serves them with.
type gatewayChain struct {
	// serverNames are the SNI names that select the chain; nil selects
	// every connection no other chain claims (a spec.tls entry for any host).
	serverNames []string
	routeName   string
	secretName  string
	tls         *pushcontext.IngressTLSHost
}

// anyHost is the Ingress IR's host for "every host".
const anyHost = "*"

// GatewayHTTPRouteName is the route configuration of the gateway's HTTP
// listener, Istio's "http.<port>".
func GatewayHTTPRouteName(port uint32) string {
	return "http." + strconv.FormatUint(uint64(port), 10)
}

// GatewayHTTPSRouteName is the route configuration of one HTTPS filter
// chain: "https.<port>.<host>", after the first host the chain serves ("*"
// for the chain of any host). A host belongs to one chain only, so the name
// is unique, and it stays put while other Ingresses come and go.
func GatewayHTTPSRouteName(port uint32, host string) string {
	return "https." + strconv.FormatUint(uint64(port), 10) + "." + host
}

// gatewayChains turns the TLS hosts of the gateway into filter chains that
// Envoy accepts: two chains must never match the same SNI name, so a host
// that an earlier entry (older Ingress first, as the index orders them)
// already serves is dropped from a later one, with a reason on the Ingress
// that lost it; an entry left without hosts gets no chain. report, when
// not nil, receives those reasons.
func gatewayChains(gw *pushcontext.IngressGateway, report func(model.ConfigKey, string)) []gatewayChain {
	if report == nil {
		report = func(model.ConfigKey, string) {}
	}
	if gw.HTTPSPort == 0 || len(gw.TLS) == 0 {
		return nil
	}
	chains := make([]gatewayChain, 0, len(gw.TLS))
	owners := make(map[string]*pushcontext.IngressTLSHost, len(gw.TLS))
	var anyOwner *pushcontext.IngressTLSHost
	for _, t := range gw.TLS {
		if gw.HTTPSPort == gw.HTTPPort {
			report(ingressKey(t.From), fmt.Sprintf(
				"TLS for %s dropped: the gateway's HTTPS port %d is also its HTTP port", strings.Join(t.Hosts, ","), gw.HTTPSPort))
			continue
		}
		hosts := t.Hosts
		if len(hosts) == 0 {
			hosts = []string{anyHost}
		}
		var names []string
		catchAll := false
		for _, h := range hosts {
			h = strings.ToLower(h)
			if h == anyHost {
				if anyOwner != nil {
					report(ingressKey(t.From), fmt.Sprintf(
						"TLS for any host with secret %s dropped: Ingress %s already serves TLS for any host",
						t.Secret, anyOwner.From))
					continue
				}
				catchAll = true
				continue
			}
			if owner, taken := owners[h]; taken {
				report(ingressKey(t.From), fmt.Sprintf(
					"TLS host %q with secret %s dropped: Ingress %s already serves it with secret %s",
					h, t.Secret, owner.From, owner.Secret))
				continue
			}
			owners[h] = t
			names = append(names, h)
		}
		if catchAll {
			// The chain for any host takes every connection that no other
			// chain's names claim; names of its own would add nothing.
			anyOwner = t
			chains = append(chains, gatewayChain{
				routeName:  GatewayHTTPSRouteName(gw.HTTPSPort, anyHost),
				secretName: t.SecretName,
				tls:        t,
			})
			continue
		}
		if len(names) == 0 {
			continue
		}
		chains = append(chains, gatewayChain{
			serverNames: names,
			routeName:   GatewayHTTPSRouteName(gw.HTTPSPort, names[0]),
			secretName:  t.SecretName,
			tls:         t,
		})
	}
	return chains
}

// serves reports whether the chain's routes need the virtual host of host:
// the chain's names cover it, or it covers one of them (a wildcard virtual
// host routes requests for a name the chain serves). The virtual host of
// any host is in every chain: rules without a host apply to every request.
func (c *gatewayChain) serves(host string) bool {
	if c.serverNames == nil || host == anyHost {
		return true
	}
	for _, n := range c.serverNames {
		if hostCovers(n, host) || hostCovers(host, n) {
			return true
		}
	}
	return false
}

// hostCovers reports whether pattern (a host, or "*.suffix") matches host,
// case-insensitively. A wildcard matches at least one more label.
func hostCovers(pattern, host string) bool {
	if strings.EqualFold(pattern, host) {
		return true
	}
	suffix, ok := strings.CutPrefix(pattern, "*")
	if !ok || len(host) <= len(suffix) {
		return false
	}
	return strings.EqualFold(host[len(host)-len(suffix):], suffix)
}

// gatewayFor returns the ingress configuration proxy is to be served, nil
// when it is not the ingress gateway or there is nothing to serve.
func gatewayFor(proxy *model.Proxy, push *pushcontext.PushContext) *pushcontext.IngressGateway {
	if proxy.Type != model.Router || !push.IsIngressGateway(proxy) {
		return nil
	}
	return push.IngressGateway()
}

func ingressKey(n model.NamespacedName) model.ConfigKey {
	return model.ConfigKey{Kind: model.KindIngress, Namespace: n.Namespace, Name: n.Name}
}
