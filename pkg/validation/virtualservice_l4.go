package validation

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"
)

func (p *problems) tlsRoute(path string, r *networking.TLSRoute, hosts []string) {
	if r == nil {
		p.add(path, "must not be null")
		return
	}
	if len(r.GetMatch()) == 0 {
		p.add(path+".match", "at least one match is required (TLS is routed by SNI)")
	}
	for i, m := range r.GetMatch() {
		mPath := fmt.Sprintf("%s.match[%d]", path, i)
		if m == nil {
			p.add(mPath, "must not be null")
			continue
		}
		if len(m.GetSniHosts()) == 0 {
			p.add(mPath+".sniHosts", "at least one SNI host is required")
		}
		for j, sni := range m.GetSniHosts() {
			p.sniHost(fmt.Sprintf("%s.sniHosts[%d]", mPath, j), sni, hosts)
		}
		p.l4Match(mPath, m)
	}
	p.routeDestinations(path+".route", r.GetRoute())
}

// routeDestinations checks where a TLS or TCP route sends its traffic.
func (p *problems) routeDestinations(path string, ds []*networking.RouteDestination) {
	if len(ds) == 0 {
		p.add(path, "at least one destination is required")
		return
	}
	var total int64
	for i, d := range ds {
		dPath := fmt.Sprintf("%s[%d]", path, i)
		if d == nil {
			p.add(dPath, "must not be null")
			continue
		}
		total += p.weightedDestination(dPath, d)
	}
	p.totalWeight(path, len(ds), total)
}

// sniHost checks an SNI name, which must fall within one of the
// VirtualService's hosts: the route is only reached for those.
func (p *problems) sniHost(path, sni string, hosts []string) {
	if msgs := ValidateHost(sni); len(msgs) > 0 {
		for _, msg := range msgs {
			p.add(path, "%s", msg)
		}
		return
	}
	if !slices.ContainsFunc(hosts, func(h string) bool { return covers(h, sni) }) {
		p.add(path, "%q is not within any of the hosts [%s]", sni, strings.Join(hosts, ", "))
	}
}

func (p *problems) tcpRoute(path string, r *networking.TCPRoute) {
	if r == nil {
		p.add(path, "must not be null")
		return
	}
	for i, m := range r.GetMatch() {
		mPath := fmt.Sprintf("%s.match[%d]", path, i)
		if m == nil {
			p.add(mPath, "must not be null")
			continue
		}
		if s := m.GetSourceSubnet(); s != "" {
			p.subnet(mPath+".sourceSubnet", s)
		}
		p.l4Match(mPath, m)
	}
	p.routeDestinations(path+".route", r.GetRoute())
}

// l4MatchAttributes is what TLS and TCP route matches have in common.
type l4MatchAttributes interface {
	GetDestinationSubnets() []string
	GetPort() uint32
	GetSourceLabels() map[string]string
	GetGateways() []string
	GetSourceNamespace() string
}

// l4Match checks the attributes a TLS or TCP route match shares.
func (p *problems) l4Match(path string, m l4MatchAttributes) {
	p.subnets(path+".destinationSubnets", m.GetDestinationSubnets())
	if m.GetPort() != 0 {
		p.checkPort(path+".port", m.GetPort())
	}
	p.labels(path+".sourceLabels", m.GetSourceLabels())
	p.gatewayNames(path+".gateways", m.GetGateways())
	p.sourceNamespace(path+".sourceNamespace", m.GetSourceNamespace())
}

func (p *problems) subnets(path string, subnets []string) {
	for i, s := range subnets {
		p.subnet(fmt.Sprintf("%s[%d]", path, i), s)
	}
}

// subnet checks an IP address or a CIDR block.
func (p *problems) subnet(path, s string) {
	if _, err := netip.ParseAddr(s); err == nil {
		return
	}
	if _, _, err := net.ParseCIDR(s); err != nil {
		p.add(path, "%q is neither an IP address nor a CIDR block", s)
	}
}
