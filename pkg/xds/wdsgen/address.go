package wdsgen

import (
	"net/netip"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// defaultServiceAccount is the ServiceAccount Kubernetes gives a Pod that
// names none (a Pod from the YAML-directory source may leave it empty).
const defaultServiceAccount = "default"

// workloadAddress is the Address of one workload.
func workloadAddress(push *pushcontext.PushContext, w *model.Workload, uid string, targets []*model.Service,
	sliced map[*model.Service][]*workloadapi.Port, hbone bool,
) *anyAddress {
	wl := &workloadapi.Workload{
		Uid:               uid,
		Name:              w.Name,
		Namespace:         w.Namespace,
		Addresses:         ipBytes(w.IPs),
		Network:           push.Network(),
		TrustDomain:       push.TrustDomain(),
		ServiceAccount:    w.ServiceAccount,
		Node:              w.NodeName,
		CanonicalName:     w.CanonicalName,
		CanonicalRevision: w.CanonicalRevision,
		// Istio sends POD for every Kubernetes workload; the kind of its
		// owner is not told apart any more.
		WorkloadType: workloadapi.WorkloadType_POD,
		WorkloadName: w.WorkloadName,
		Services:     workloadServices(w, targets, sliced),
		ClusterId:    push.ClusterID(),
	}
	if wl.ServiceAccount == "" {
		wl.ServiceAccount = defaultServiceAccount
	}
	if !w.Ready {
		wl.Status = workloadapi.WorkloadStatus_UNHEALTHY
	}
	if hbone {
		wl.TunnelProtocol = workloadapi.TunnelProtocol_HBONE
	}
	if w.HostNetwork {
		wl.NetworkMode = workloadapi.NetworkMode_HOST_NETWORK
	}
	if l := w.Locality; l != (model.Locality{}) {
		wl.Locality = &workloadapi.Locality{Region: l.Region, Zone: l.Zone, Subzone: l.SubZone}
	}
	return &anyAddress{msg: &workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: wl}}}
}

// endpointWorkloadUID names an endpoint workload as istiod does, with the
// Service's name where istiod has the EndpointSlice's: meshpilot keeps a
// service's endpoints, not its slices, and an address is one workload per
// service either way.
func endpointWorkloadUID(clusterID string, ew pushcontext.EndpointWorkload) string {
	return clusterID + "/discovery.k8s.io/EndpointSlice/" + ew.Service.Namespace + "/" + ew.Service.Name + "/" + ew.Address
}

// endpointWorkloadAddress is the Address of an endpoint workload, as
// istiod builds one: nothing is known of it but its address, its service's
// ports and its readiness, so it has no identity and no tunnel, and, since
// such an address may also be another's (a node's, say), it is sent as a
// shared one, which node proxies do not index by IP.
func endpointWorkloadAddress(push *pushcontext.PushContext, ew pushcontext.EndpointWorkload, uid string) *anyAddress {
	ip, err := netip.ParseAddr(ew.Address)
	if err != nil {
		return nil
	}
	pl := &workloadapi.PortList{}
	healthy := true
	for _, ep := range ew.Endpoints {
		healthy = healthy && ep.Health == model.Healthy
		for _, p := range ew.Service.Ports {
			if p.Name == ep.ServicePortName {
				pl.Ports = appendPortOnce(pl.Ports, &workloadapi.Port{ServicePort: p.Port, TargetPort: ep.Port})
				break
			}
		}
	}
	wl := &workloadapi.Workload{
		Uid:         uid,
		Name:        ew.Service.Name,
		Namespace:   ew.Service.Namespace,
		Addresses:   [][]byte{ip.Unmap().AsSlice()},
		Network:     push.Network(),
		TrustDomain: push.TrustDomain(),
		Services:    map[string]*workloadapi.PortList{serviceName(ew.Service): pl},
		ClusterId:   push.ClusterID(),
		NetworkMode: workloadapi.NetworkMode_HOST_NETWORK,
	}
	if !healthy {
		wl.Status = workloadapi.WorkloadStatus_UNHEALTHY
	}
	return &anyAddress{msg: &workloadapi.Address{Type: &workloadapi.Address_Workload{Workload: wl}}}
}

// workloadServices maps each service that selects w to the ports that
// reach w: a named target port resolves through w's own container ports,
// and a port that w does not have is left out, as Kubernetes does. Each
// selector-less service whose slices name w maps to the ports they give.
func workloadServices(w *model.Workload, targets []*model.Service, sliced map[*model.Service][]*workloadapi.Port) map[string]*workloadapi.PortList {
	if len(targets)+len(sliced) == 0 {
		return nil
	}
	out := make(map[string]*workloadapi.PortList, len(targets)+len(sliced))
	for svc, ports := range sliced {
		out[serviceName(svc)] = &workloadapi.PortList{Ports: ports}
	}
	for _, svc := range targets {
		pl := &workloadapi.PortList{Ports: make([]*workloadapi.Port, 0, len(svc.Ports))}
		for _, p := range svc.Ports {
			target := p.TargetPort
			if p.TargetPortName != "" {
				if target = w.PortByName(p.TargetPortName); target == 0 {
					continue
				}
			}
			if target == 0 {
				target = p.Port
			}
			pl.Ports = append(pl.Ports, &workloadapi.Port{ServicePort: p.Port, TargetPort: target})
		}
		out[serviceName(svc)] = pl
	}
	return out
}

// serviceAddress is the Address of one service. Its VIPs are on the
// cluster's network, as its workloads are.
func serviceAddress(svc *model.Service, network string) *anyAddress {
	s := &workloadapi.Service{
		Name:      svc.Name,
		Namespace: svc.Namespace,
		Hostname:  svc.Hostname,
		Ports:     make([]*workloadapi.Port, 0, len(svc.Ports)),
		// A Kubernetes Service is the authority for its own host name.
		Canonical: true,
	}
	s.LoadBalancing = loadBalancing(svc)
	var v4, v6 bool
	for _, ip := range svc.ClusterIPs {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		addr = addr.Unmap()
		v4, v6 = v4 || addr.Is4(), v6 || addr.Is6()
		s.Addresses = append(s.Addresses, &workloadapi.NetworkAddress{Network: network, Address: addr.AsSlice()})
	}
	switch {
	case v4 && v6:
		s.IpFamilies = workloadapi.IPFamilies_DUAL
	case v4:
		s.IpFamilies = workloadapi.IPFamilies_IPV4_ONLY
	case v6:
		s.IpFamilies = workloadapi.IPFamilies_IPV6_ONLY
	}
	for _, p := range svc.Ports {
		// A named target port is 0 here: each workload's entry says.
		s.Ports = append(s.Ports, &workloadapi.Port{ServicePort: p.Port, TargetPort: p.TargetPort, AppProtocol: appProtocol(p.Protocol)})
	}
	return &anyAddress{msg: &workloadapi.Address{Type: &workloadapi.Address_Service{Service: s}}}
}

// loadBalancing tells node proxies which of a service's workloads a client
// may reach, as istiod does; nil for any of them that is healthy.
func loadBalancing(svc *model.Service) *workloadapi.LoadBalancing {
	var lb *workloadapi.LoadBalancing
	if svc.NodeLocal {
		// internalTrafficPolicy Local: only the client's own node, and
		// nothing when it has none of the service's Pods, as kube-proxy.
		lb = &workloadapi.LoadBalancing{
			RoutingPreference: []workloadapi.LoadBalancing_Scope{workloadapi.LoadBalancing_NODE},
			Mode:              workloadapi.LoadBalancing_STRICT,
		}
	}
	if svc.PublishNotReady {
		// Node proxies pick only healthy workloads unless told otherwise;
		// kube-proxy sends such a service's traffic to unready Pods too.
		if lb == nil {
			lb = &workloadapi.LoadBalancing{}
		}
		lb.HealthPolicy = workloadapi.LoadBalancing_ALLOW_ALL
	}
	return lb
}

// appProtocol is the WDS name of a port's protocol where it has one; node
// proxies treat the rest as opaque TCP.
func appProtocol(p model.Protocol) workloadapi.AppProtocol {
	switch p {
	case model.ProtocolHTTP:
		return workloadapi.AppProtocol_HTTP11
	case model.ProtocolHTTP2:
		return workloadapi.AppProtocol_HTTP2
	case model.ProtocolGRPC:
		return workloadapi.AppProtocol_GRPC
	}
	return workloadapi.AppProtocol_UNKNOWN
}

// ipBytes encodes the valid IPs, 4 bytes for IPv4 and 16 for IPv6.
func ipBytes(ips []string) [][]byte {
	out := make([][]byte, 0, len(ips))
	for _, ip := range ips {
		if addr, err := netip.ParseAddr(ip); err == nil {
			out = append(out, addr.Unmap().AsSlice())
		}
	}
	return out
}
