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
	}
	if svc.Spec.Type != corev1.ServiceTypeExternalName {
		out.ClusterIPs = clusterIPs(svc)
	}
	out.LoadBalancer = loadBalancerIngress(svc.Status.LoadBalancer.Ingress)
	if len(svc.Spec.ExternalIPs) > 0 {
		out.ExternalIPs = svc.Spec.ExternalIPs
	}
	if len(svc.Spec.Ports) > 0 {
		ports := make([]model.Port, len(svc.Spec.Ports))
		out.Ports = make([]*model.Port, len(svc.Spec.Ports))
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			ports[i] = model.Port{
				Name:     sp.Name,
				Port:     uint32(sp.Port),
				Protocol: PortProtocol(sp.Name, sp.Protocol, sp.AppProtocol),
			}
			if sp.TargetPort.StrVal != "" {
				ports[i].TargetPortName = sp.TargetPort.StrVal
			} else if sp.TargetPort.IntVal > 0 {
				ports[i].TargetPort = uint32(sp.TargetPort.IntVal)
			} else {
				// Kubernetes defaults an unset targetPort to the port.
				ports[i].TargetPort = uint32(sp.Port)
			}
			out.Ports[i] = &ports[i]
		}
		slices.SortStableFunc(out.Ports, func(a, b *model.Port) int { return cmp.Compare(a.Port, b.Port) })
	}
	return out
}

// sameService reports whether two conversions of a Service are alike in
// everything the model keeps.
func sameService(a, b *model.Service) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.Hostname == b.Hostname &&
		a.CreationTime.Equal(b.CreationTime) &&
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
