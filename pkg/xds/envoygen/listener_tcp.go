package envoygen

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tcpProxyTypeURL is the Any type of a packed TcpProxy.
var tcpProxyTypeURL = "type.googleapis.com/" + string((&tcp.TcpProxy{}).ProtoReflect().Descriptor().FullName())

// tcpListenerScratch is one outbound TCP listener, reused for every TCP
// listener of a build: each is marshalled before the next is filled in, so
// a listener costs a handful of allocations (its names and its bytes)
// instead of a couple of dozen. Never share a scratch between goroutines.
type tcpListenerScratch struct {
	listener listener.Listener
	address  core.Address
	socket   core.Address_SocketAddress
	sockAddr core.SocketAddress
	port     core.SocketAddress_PortValue
	chain    listener.FilterChain
	chains   [1]*listener.FilterChain
	filter   listener.Filter
	filters  [1]*listener.Filter
	typed    listener.Filter_TypedConfig
	packed   anypb.Any
	proxy    tcp.TcpProxy
	cluster  tcp.TcpProxy_Cluster
	proxyBuf []byte
}

var (
	bindToPortFalse = wrapperspb.Bool(false)
	zeroDuration    = durationpb.New(0)
)

func newTCPListenerScratch() *tcpListenerScratch {
	s := &tcpListenerScratch{}
	l := &s.listener
	l.Address = &s.address
	s.address.Address = &s.socket
	s.socket.SocketAddress = &s.sockAddr
	s.sockAddr.PortSpecifier = &s.port
	s.chains[0] = &s.chain
	l.FilterChains = s.chains[:]
	s.filters[0] = &s.filter
	s.chain.Filters = s.filters[:]
	s.filter.Name = tcpProxyFilter
	s.filter.ConfigType = &s.typed
	s.typed.TypedConfig = &s.packed
	s.packed.TypeUrl = tcpProxyTypeURL
	s.proxy.ClusterSpecifier = &s.cluster
	// The same settings as outboundListener.
	l.BindToPort = bindToPortFalse
	l.TrafficDirection = core.TrafficDirection_OUTBOUND
	l.ListenerFiltersTimeout = zeroDuration
	l.ContinueOnListenerFiltersTimeout = true
	return s
}

// build marshals the listener name on ip:port (and extra addresses) that
// proxies every connection to cluster, through tunnel when set.
func (s *tcpListenerScratch) build(name, ip string, extraIPs []string, port uint32, cluster string, tunnel *tcp.TcpProxy_TunnelingConfig) ([]byte, error) {
	s.proxy.StatPrefix = cluster
	s.cluster.Cluster = cluster
	s.proxy.TunnelingConfig = tunnel
	var err error
	if s.proxyBuf, err = lrMarshal.MarshalAppend(s.proxyBuf[:0], &s.proxy); err != nil {
		return nil, err
	}
	s.packed.Value = s.proxyBuf
	l := &s.listener
	l.Name = name
	s.sockAddr.Address = ip
	s.port.PortValue = port
	l.AdditionalAddresses = nil
	for _, extra := range extraIPs {
		l.AdditionalAddresses = append(l.AdditionalAddresses, &listener.AdditionalAddress{Address: socketAddress(extra, port)})
	}
	size := lrMarshal.Size(l)
	return (proto.MarshalOptions{Deterministic: true, UseCachedSize: true}).MarshalAppend(make([]byte, 0, size), l)
}
