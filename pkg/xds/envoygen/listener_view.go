package envoygen

import (
	"slices"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// outboundView is what a namespace sees outbound, grouped the way listeners
// and routes need it. It depends only on the push context and the
// namespace, so one view serves every proxy of the namespace.
type outboundView struct {
	// httpPorts are the service port numbers with an HTTP protocol, sorted;
	// each gets one shared listener and one route configuration.
	httpPorts []uint32
	// httpServices lists, per HTTP port, the services that have it, sorted
	// by hostname.
	httpServices map[uint32][]*model.Service
	// tcpTargets are the service ports with a TCP-like protocol, in
	// hostname then port order; each gets its own listener on the
	// service's cluster IP.
	tcpTargets []serviceTarget
	// reserved are the service ports that collide with the virtual
	// listeners' ports and get no listener.
	reserved []serviceTarget
}

// serviceTarget is one port of one service.
type serviceTarget struct {
	svc  *model.Service
	port *model.Port
}

// reservedListenerPort reports whether a service port would collide with the
// virtual listeners; Istio leaves such ports out too.
func reservedListenerPort(port uint32) bool {
	return port == VirtualOutboundPort || port == VirtualInboundPort
}

func buildOutboundView(push *pushcontext.PushContext, namespace string) *outboundView {
	v := &outboundView{httpServices: map[uint32][]*model.Service{}}
	for _, svc := range push.ServicesVisibleTo(namespace) {
		if push.AliasTarget(namespace, svc) != nil {
			// An alias has no listener and no virtual host of its own: its
			// names are the target's (see vhostHosts), on the target's
			// ports; its own ports do not matter, as in Kubernetes.
			continue
		}
		for _, p := range svc.Ports {
			switch {
			case reservedListenerPort(p.Port):
				v.reserved = append(v.reserved, serviceTarget{svc: svc, port: p})
			case p.Protocol.IsHTTP():
				if _, seen := v.httpServices[p.Port]; !seen {
					v.httpPorts = append(v.httpPorts, p.Port)
				}
				v.httpServices[p.Port] = append(v.httpServices[p.Port], svc)
			default:
				v.tcpTargets = append(v.tcpTargets, serviceTarget{svc: svc, port: p})
			}
		}
	}
	slices.Sort(v.httpPorts)
	return v
}

// outboundViews caches one view per namespace per push version.
type outboundViews struct {
	cache lrCache
}

type outboundViewKey struct{ namespace string }

func (o *outboundViews) get(push *pushcontext.PushContext, namespace string) *outboundView {
	v, _ := o.cache.generation(push.Version()).get(outboundViewKey{namespace}, func() (any, error) {
		return buildOutboundView(push, namespace), nil
	})
	return v.(*outboundView)
}
