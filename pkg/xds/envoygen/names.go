package envoygen

import (
	"strconv"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// Names of the fixed resources every sidecar gets, as Istio spells them so
// existing tooling (istioctl proxy-config, dashboards) reads them.
const (
	// PassthroughCluster forwards to the original destination of a connection
	// that matched no known service.
	PassthroughCluster = "PassthroughCluster"
	// BlackHoleCluster has no endpoints; traffic sent there is dropped.
	BlackHoleCluster = "BlackHoleCluster"
	// InboundPassthroughCluster forwards inbound traffic for ports the
	// workload serves without a Service to the original destination, bound to
	// InboundPassthroughBindIP so that iptables does not capture it again.
	InboundPassthroughCluster = "InboundPassthroughCluster"
	// VirtualOutboundListener captures outbound traffic on VirtualOutboundPort.
	VirtualOutboundListener = "virtualOutbound"
	// VirtualInboundListener captures inbound traffic on VirtualInboundPort.
	VirtualInboundListener = "virtualInbound"
)

// InboundPassthroughBindIP is the source address of inbound passthrough
// connections (Istio's; iptables skips traffic from it).
const InboundPassthroughBindIP = "127.0.0.6"

// Ports of the virtual listeners (iptables redirects there).
const (
	VirtualOutboundPort uint32 = 15001
	VirtualInboundPort  uint32 = 15006
)

// OutboundClusterName is Istio's outbound cluster name:
// "outbound|<port>|<subset>|<host>" (subset empty for the whole service).
func OutboundClusterName(host string, port uint32, subset string) string {
	return loadassign.ClusterName(host, port, subset)
}

// InboundClusterName is Istio's inbound cluster name for a workload's own
// service port: "inbound|<port>||", where port is the port the workload
// listens on (the service port's target port), as in Istio.
func InboundClusterName(port uint32) string {
	return "inbound|" + strconv.FormatUint(uint64(port), 10) + "||"
}

// OutboundRouteName is the name of the route configuration of an outbound
// HTTP port: the port number, Istio's convention.
func OutboundRouteName(port uint32) string {
	return strconv.FormatUint(uint64(port), 10)
}

// ParseOutboundClusterName splits an outbound cluster name into its host,
// port and subset; ok is false for any other name.
func ParseOutboundClusterName(name string) (host string, port uint32, subset string, ok bool) {
	rest, found := strings.CutPrefix(name, "outbound|")
	if !found {
		return "", 0, "", false
	}
	portStr, rest, found := strings.Cut(rest, "|")
	if !found {
		return "", 0, "", false
	}
	subset, host, found = strings.Cut(rest, "|")
	if !found || host == "" || strings.Contains(host, "|") {
		return "", 0, "", false
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || p == 0 {
		return "", 0, "", false
	}
	return host, uint32(p), subset, true
}
