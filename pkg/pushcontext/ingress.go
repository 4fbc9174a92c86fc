package pushcontext

import (
	"maps"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// IngressOptions say which Ingresses are served and by which gateway.
type IngressOptions struct {
	Ownership model.IngressOwnership
	// GatewayService is the Service in front of the ingress gateway: its
	// ports give the listen ports, and its addresses go into Ingress status.
	GatewayService model.NamespacedName
	// GatewaySelector picks the gateway's proxies by their labels.
	GatewaySelector map[string]string
}

const (
	defaultIngressClass = "istio"
	defaultIngressMode  = model.IngressModeStrict
)

// Istio's defaults: the gateway Service istio-system/istio-ingressgateway,
// whose pods are labelled istio=ingressgateway.
const (
	defaultGatewayNamespace     = "istio-system"
	defaultGatewayName          = "istio-ingressgateway"
	defaultGatewaySelectorKey   = "istio"
	defaultGatewaySelectorValue = "ingressgateway"
)

func (o IngressOptions) withDefaults() IngressOptions {
	if o.Ownership.Class == "" {
		o.Ownership.Class = defaultIngressClass
	}
	if o.Ownership.Mode == "" {
		o.Ownership.Mode = defaultIngressMode
	}
	if o.GatewayService == (model.NamespacedName{}) {
		o.GatewayService = model.NamespacedName{Namespace: defaultGatewayNamespace, Name: defaultGatewayName}
	}
	if len(o.GatewaySelector) == 0 {
		o.GatewaySelector = map[string]string{defaultGatewaySelectorKey: defaultGatewaySelectorValue}
	}
	return o
}

func (o IngressOptions) equal(p IngressOptions) bool {
	return o.Ownership == p.Ownership && o.GatewayService == p.GatewayService &&
		maps.Equal(o.GatewaySelector, p.GatewaySelector)
}

// IngressGateway is what the ingress gateway serves for the Ingresses the
// mesh owns. It is shared by every reader: never mutate it.
type IngressGateway struct {
	// HTTPPort and HTTPSPort are the ports the gateway listens on: the
	// gateway Service's targetPort for its port 80 and 443 (a named
	// targetPort falls back to the service port, as Istio maps them), 0 when
	// the Service has no such port.
	HTTPPort, HTTPSPort uint32
	// HTTP is sorted by host, with "*" (rules without a host, and the
	// defaultBackend) last.
	HTTP []*IngressVirtualHost
	// TLS has one entry per (Ingress, spec.tls entry) whose Secret is
	// usable, sorted by hosts then by Ingress. No host appears twice.
	TLS []*IngressTLSHost
}

// IngressVirtualHost is the merged routing for one host.
type IngressVirtualHost struct {
	Host string // "*" for any host
	// Routes are most specific first: longer paths first, Exact before
	// Prefix at equal length, then by path. An Ingress's defaultBackend
	// catches, as a "/" prefix, whatever "*" and its own hosts do not
	// route otherwise; a rule for "/" beats any defaultBackend.
	Routes []*IngressRoute
}

// IngressRoute sends one path to one service port.
type IngressRoute struct {
	// PathType is Exact or Prefix; ImplementationSpecific becomes one of them.
	PathType model.PathType
	// Path starts with "/". A Prefix matches by path element: "/foo"
	// matches "/foo" and "/foo/bar" but not "/foobar". Prefix paths carry no
	// trailing "/" except the root "/".
	Path string
	// Cluster is outbound|<servicePort>||<service FQDN>.
	Cluster string
	// Host is the backend service's FQDN and Port its port number (named
	// ports are resolved through the Service).
	Host string
	Port uint32
	// Via is the FQDN of the ExternalName Service the Ingress named when
	// that is an alias; Host is then its target.
	Via string
	// From is the Ingress the route came from.
	From model.NamespacedName
}

// IngressTLSHost terminates TLS for some hosts with one Secret.
type IngressTLSHost struct {
	// Hosts are spec.tls[].hosts, sorted; when the entry names none, the
	// Ingress's rule hosts, or "*" when it has none either (as Istio does).
	Hosts []string
	// SecretName is the SDS resource name, IngressSecretName(Secret).
	SecretName string
	Secret     model.NamespacedName
	From       model.NamespacedName
}

// IngressSecretName is the SDS resource name of the certificate held in a
// Kubernetes Secret, in Istio's form.
func IngressSecretName(namespace, name string) string {
	return "kubernetes://" + namespace + "/" + name
}

// IngressGateway returns what the ingress gateway serves, or nil when the
// gateway Service does not exist or the mesh owns no Ingress.
func (pc *PushContext) IngressGateway() *IngressGateway { return pc.ingress.gateway }

// IsIngressGateway reports whether p is a router in the gateway Service's
// namespace whose labels match the gateway selector. Labels are what a
// proxy claims; its namespace, on a stream that proved an identity, is what
// it proved (the xDS server refuses a claim that differs). The namespace is
// the trust boundary: the gateway is served every Ingress's TLS Secrets,
// private keys included, so a router elsewhere must not become the gateway
// by copying its labels.
func (pc *PushContext) IsIngressGateway(p *model.Proxy) bool {
	if p == nil || p.Type != model.Router || p.Namespace != pc.opts.Ingress.GatewayService.Namespace {
		return false
	}
	for k, v := range pc.opts.Ingress.GatewaySelector {
		if got, ok := p.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// IngressProblems returns, for each owned Ingress that has any, what was
// dropped from it and why, sorted. Ingresses without problems are absent.
// The map and its slices are shared: never mutate them.
func (pc *PushContext) IngressProblems() map[model.NamespacedName][]string {
	return pc.ingress.problems
}

// Secret returns a TLS Secret that the ingress gateway serves (one that a
// host in IngressGateway().TLS references, and that holds a valid
// certificate and key), or nil for any other name.
func (pc *PushContext) Secret(name model.NamespacedName) *model.Secret {
	return pc.ingress.secrets[name]
}
