package controllers

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Well-known names Istio reads from Kubernetes objects.
const (
	annotationExportTo = "networking.istio.io/exportTo"
	// DefaultDomainSuffix is the cluster DNS domain when none is configured.
	DefaultDomainSuffix = "cluster.local"
)

// ServiceHostname is the mesh name of a Kubernetes Service.
func ServiceHostname(name, namespace, domainSuffix string) string {
	return name + "." + namespace + ".svc." + domainSuffix
}

// ConvertService turns a Kubernetes Service into the model's view of it.
func ConvertService(svc *corev1.Service, domainSuffix string) *model.Service {
	out := &model.Service{
		Name:         svc.Name,
		Namespace:    svc.Namespace,
		Hostname:     ServiceHostname(svc.Name, svc.Namespace, domainSuffix),
		Labels:       svc.Labels,
		Selector:     svc.Spec.Selector,
		ExportTo:     parseExportTo(svc.Annotations[annotationExportTo], svc.Namespace),
		CreationTime: svc.CreationTimestamp.Time,
		// An ExternalName Service has no endpoints: the flag means nothing.
		PublishNotReady: svc.Spec.PublishNotReadyAddresses && svc.Spec.Type != corev1.ServiceTypeExternalName,
		NodeLocal: svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal &&
			svc.Spec.Type != corev1.ServiceTypeExternalName,
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		// Kubernetes makes no endpoints for an ExternalName Service and
		// ignores its selector. Without a name (which only an unvalidated
		// file can hold) it is an ordinary service with no address, as in
		// Istio.
		out.ExternalName, out.Selector = svc.Spec.ExternalName, nil
	} else {
		out.ClusterIPs = clusterIPs(svc)
	}
	out.LoadBalancer = loadBalancerIngress(svc.Status.LoadBalancer.Ingress)
	if len(svc.Spec.ExternalIPs) > 0 {
		out.ExternalIPs = svc.Spec.ExternalIPs
	}
	out.Ports = servicePorts(svc.Spec.Ports)
	return out
}

// servicePorts converts the ports the mesh proxies, sorted by number. Its
// proxies carry TCP alone, as Istio's do, so a UDP or SCTP port, or a TCP
// port Istio reads as UDP by its name, is left out: the model then holds at
// most one port per number, and every lookup by number (cluster names,
// route destinations, Ingress backends, target ports) finds the one the
// mesh serves, where kube-dns lists UDP 53 before TCP 53. Of two TCP ports
// of one number, which only an unvalidated file can hold, the first stays.
func servicePorts(in []corev1.ServicePort) []*model.Port {
	var backing []model.Port // one allocation for all the ports
	var out []*model.Port
	for i := range in {
		sp := &in[i]
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		proto := PortProtocol(sp.Name, sp.Protocol, sp.AppProtocol)
		if proto == model.ProtocolUDP || slices.ContainsFunc(out, func(p *model.Port) bool { return p.Port == uint32(sp.Port) }) {
			continue
		}
		if backing == nil {
			backing = make([]model.Port, 0, len(in))
			out = make([]*model.Port, 0, len(in))
		}
		p := model.Port{Name: sp.Name, Port: uint32(sp.Port), Protocol: proto}
		switch {
		case sp.TargetPort.StrVal != "":
			p.TargetPortName = sp.TargetPort.StrVal
		case sp.TargetPort.IntVal > 0:
			p.TargetPort = uint32(sp.TargetPort.IntVal)
		default:
			// Kubernetes defaults an unset targetPort to the port.
			p.TargetPort = uint32(sp.Port)
		}
		backing = append(backing, p)
		out = append(out, &backing[len(backing)-1])
	}
	slices.SortFunc(out, func(a, b *model.Port) int { return cmp.Compare(a.Port, b.Port) })
	return out
}

// sameService reports whether two conversions of a Service are alike in
// everything the model keeps.
func sameService(a, b *model.Service) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.Hostname == b.Hostname &&
		a.CreationTime.Equal(b.CreationTime) && a.ExternalName == b.ExternalName && a.PublishNotReady == b.PublishNotReady &&
		a.NodeLocal == b.NodeLocal &&
		slices.Equal(a.ClusterIPs, b.ClusterIPs) && slices.Equal(a.ExternalIPs, b.ExternalIPs) &&
		slices.Equal(a.LoadBalancer, b.LoadBalancer) &&
		// nil (public) and empty (nobody) exportTo differ.
		(a.ExportTo == nil) == (b.ExportTo == nil) && slices.Equal(a.ExportTo, b.ExportTo) &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Selector, b.Selector) &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y *model.Port) bool { return *x == *y })
}

func clusterIPs(svc *corev1.Service) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, ip := range ips {
		if ip == "" || ip == corev1.ClusterIPNone {
			continue
		}
		out = append(out, ip)
	}
	return out
}

// loadBalancerIngress keeps the addresses of a load balancer status,
// skipping entries that carry neither an IP nor a hostname.
func loadBalancerIngress(lbs []corev1.LoadBalancerIngress) []model.LoadBalancerIngress {
	var out []model.LoadBalancerIngress
	for _, lb := range lbs {
		if lb.IP == "" && lb.Hostname == "" {
			continue
		}
		if out == nil {
			out = make([]model.LoadBalancerIngress, 0, len(lbs))
		}
		out = append(out, model.LoadBalancerIngress{IP: lb.IP, Hostname: lb.Hostname})
	}
	return out
}

// parseExportTo reads the exportTo annotation: no annotation means public,
// "." is the object's own namespace, "~" alone means nobody (a non-nil empty
// list), and "*" is kept as is.
func parseExportTo(annotation, namespace string) model.ExportTo {
	if strings.TrimSpace(annotation) == "" {
		return nil
	}
	out := model.ExportTo{}
	for entry := range strings.SplitSeq(annotation, ",") {
		entry = strings.TrimSpace(entry)
		switch entry {
		case "", "~":
			continue
		case ".":
			entry = namespace
		}
		if !slices.Contains(out, entry) {
			out = append(out, entry)
		}
	}
	return out
}

// PortProtocol decides a service port's protocol the way Istio does: UDP
// ports are UDP; otherwise appProtocol wins when it names a known protocol;
// otherwise the port name's prefix (before the first '-') decides.
func PortProtocol(name string, proto corev1.Protocol, appProtocol *string) model.Protocol {
	if proto == corev1.ProtocolUDP {
		return model.ProtocolUDP
	}
	if appProtocol != nil {
		switch *appProtocol {
		case "kubernetes.io/h2c":
			return model.ProtocolHTTP2
		case "kubernetes.io/ws", "kubernetes.io/wss":
			return model.ProtocolHTTP
		}
		if p := protocolByName(*appProtocol); p != model.ProtocolUnknown {
			return p
		}
	}
	lower := strings.ToLower(name)
	if lower == "grpc-web" || strings.HasPrefix(lower, "grpc-web-") {
		return model.ProtocolHTTP
	}
	prefix, _, _ := strings.Cut(lower, "-")
	return protocolByName(prefix)
}

func protocolByName(name string) model.Protocol {
	switch strings.ToLower(name) {
	case "http", "grpc-web":
		return model.ProtocolHTTP
	case "http2":
		return model.ProtocolHTTP2
	case "grpc":
		return model.ProtocolGRPC
	case "https":
		return model.ProtocolHTTPS
	case "tls":
		return model.ProtocolTLS
	case "tcp", "mongo", "redis", "mysql":
		return model.ProtocolTCP
	case "udp":
		return model.ProtocolUDP
	default:
		return model.ProtocolUnknown
	}
}
