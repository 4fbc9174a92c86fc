package grpcgen

import (
	"net"
	"strconv"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/xds/loadassign"
)

// InboundListenerPrefix is the prefix of the listener names gRPC servers ask
// for, as set by server_listener_resource_name_template in Istio bootstraps;
// the rest of the name is the listen address "ip:port".
const InboundListenerPrefix = "xds.istio.io/grpc/lds/inbound/"

// clusterKey identifies an outbound cluster without building its name, so
// cache lookups on the hot path do not allocate.
type clusterKey struct {
	host   string
	port   uint32
	subset string
}

func (k clusterKey) name() string { return loadassign.ClusterName(k.host, k.port, k.subset) }

// parseClusterName is the inverse of loadassign.ClusterName. The returned strings alias name.
func parseClusterName(name string) (clusterKey, bool) {
	rest, ok := strings.CutPrefix(name, "outbound|")
	if !ok {
		return clusterKey{}, false
	}
	portStr, rest, ok := strings.Cut(rest, "|")
	if !ok {
		return clusterKey{}, false
	}
	subset, host, ok := strings.Cut(rest, "|")
	if !ok || host == "" || strings.Contains(host, "|") {
		return clusterKey{}, false
	}
	port, ok := parsePort(portStr)
	if !ok {
		return clusterKey{}, false
	}
	return clusterKey{host: host, port: port, subset: subset}, true
}

// splitHostPort splits "host:port" (IPv6 hosts in brackets) with a valid,
// non-zero port.
func splitHostPort(s string) (string, uint32, bool) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", 0, false
	}
	port, ok := parsePort(portStr)
	return host, port, ok
}

func parsePort(s string) (uint32, bool) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, false
	}
	return uint32(p), true
}

func hostPort(host string, port uint32) string {
	return host + ":" + strconv.FormatUint(uint64(port), 10)
}
