package model

import (
	"slices"
	"time"
)

// Protocol is the application protocol of a service port, following Istio's
// naming conventions (port name prefix or appProtocol).
type Protocol string

const (
	ProtocolHTTP    Protocol = "HTTP"
	ProtocolHTTP2   Protocol = "HTTP2"
	ProtocolGRPC    Protocol = "GRPC"
	ProtocolHTTPS   Protocol = "HTTPS"
	ProtocolTLS     Protocol = "TLS"
	ProtocolTCP     Protocol = "TCP"
	ProtocolUDP     Protocol = "UDP"
	ProtocolUnknown Protocol = "UNKNOWN"
)

// IsHTTP reports whether traffic on the port is HTTP of some version.
func (p Protocol) IsHTTP() bool {
	return p == ProtocolHTTP || p == ProtocolHTTP2 || p == ProtocolGRPC
}

// Port is one port of a Service.
type Port struct {
	Name     string
	Port     uint32
	Protocol Protocol
	// TargetPort is the numeric target port, or 0 when the target port is
	// named (then TargetPortName is set and each endpoint carries its number).
	TargetPort     uint32
	TargetPortName string
}

// Service is a Kubernetes Service as the mesh sees it. Its Ports are the
// ones the mesh proxies: TCP ports only, as in Istio, whose proxies neither
// capture nor carry UDP or SCTP (nor a port named udp-*, which Istio reads
// as UDP). So a number names at most one port, and no lookup by number can
// find the UDP twin of a TCP port (kube-dns has UDP and TCP 53); a Service
// with only UDP ports has none. Conversion decides which ports these are.
type Service struct {
	Name      string
	Namespace string
	// Hostname is the fully qualified name, <name>.<namespace>.svc.<domain>.
	Hostname     string
	ClusterIPs   []string
	Ports        []*Port // sorted by port number; TCP only (see Service)
	Labels       map[string]string
	Selector     map[string]string
	ExportTo     ExportTo
	CreationTime time.Time
	// LoadBalancer is status.loadBalancer.ingress and ExternalIPs is
	// spec.externalIPs: the addresses a gateway Service is reached at,
	// which Ingress status reports.
	LoadBalancer []LoadBalancerIngress
	ExternalIPs  []string
	// ExternalName is spec.externalName of a Service of type ExternalName:
	// the DNS name that cluster DNS answers the Hostname with (a CNAME),
	// usually outside the mesh. Such a service has no cluster IP and no
	// endpoints; proxies resolve the name themselves, on the service port.
	ExternalName string
	// PublishNotReady is spec.publishNotReadyAddresses: the service's Pods
	// take traffic before they are Ready (a StatefulSet's peers finding
	// each other), so node proxies must not skip unready ones.
	PublishNotReady bool
	// NodeLocal is spec.internalTrafficPolicy Local: traffic from inside
	// the cluster goes only to the service's Pods on the client's node.
	NodeLocal bool
}

// Key identifies the service in the store.
func (s *Service) Key() NamespacedName {
	return NamespacedName{Namespace: s.Namespace, Name: s.Name}
}

// IsExternalName reports whether s is an ExternalName Service, which proxies
// reach by resolving its name (or, as an alias, through the Service that
// name leads to) rather than through endpoints of its own.
func (s *Service) IsExternalName() bool { return s.ExternalName != "" }

// PortByNumber returns the service port with the given number, or nil: the
// one port the mesh serves on that number (see Service).
func (s *Service) PortByNumber(port uint32) *Port {
	i, found := slices.BinarySearchFunc(s.Ports, port, func(p *Port, n uint32) int {
		return int(int64(p.Port) - int64(n))
	})
	if !found {
		return nil
	}
	return s.Ports[i]
}

// PortByName returns the service port with the given name, or nil.
func (s *Service) PortByName(name string) *Port {
	for _, p := range s.Ports {
		if p.Name == name {
			return p
		}
	}
	return nil
}
