package envoygen

import (
	"path/filepath"
	"testing"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestSimulationUDPPorts: sidecars proxy TCP only, so a UDP port must
// neither hide the TCP port of the same number (kube-dns lists dns, UDP 53,
// before dns-tcp, TCP 53) nor get anything of its own. The fixture is the
// udp-ports cluster golden's input.
func TestSimulationUDPPorts(t *testing.T) {
	sims := simulationsOf(t, filepath.Join("testdata", "clusters", "udp-ports.in.yaml"))
	const (
		kubeDNS  = "outbound|53||kube-dns.kube-system.svc.cluster.local"
		resolver = "outbound|53||resolver.app.svc.cluster.local"
	)
	runRouteCases(t, sims, []routeCase{
		{"TCP to kube-dns:53 reaches the dns-tcp endpoints", "client",
			xdstest.Request{DestinationIP: "10.96.0.10", Port: 53},
			routeWant{xdstest.OutcomeRouted, "10.96.0.10_53", "", "", kubeDNS, nil, "",
				[]xdstest.Endpoint{ep("10.244.0.2:53"), ep("10.244.0.3:53")}}},
		{"TCP to kube-dns:9153, a port with no UDP twin", "client",
			xdstest.Request{DestinationIP: "10.96.0.10", Port: 9153},
			routeWant{xdstest.OutcomeRouted, "10.96.0.10_9153", "", "", "outbound|9153||kube-dns.kube-system.svc.cluster.local", nil, "",
				[]xdstest.Endpoint{ep("10.244.0.2:9153"), ep("10.244.0.3:9153")}}},
		{"TCP to resolver:53 reaches the TCP target port, not the UDP one", "client",
			xdstest.Request{DestinationIP: "10.96.1.53", Port: 53},
			routeWant{xdstest.OutcomeRouted, "10.96.1.53_53", "", "", resolver, nil, "",
				[]xdstest.Endpoint{ep("10.1.0.5:5354")}}},
		{"a service with only a UDP port has no listener: passthrough", "client",
			xdstest.Request{DestinationIP: "10.96.2.125", Port: 8125},
			routeWant{xdstest.OutcomeRouted, VirtualOutboundListener, "", "", PassthroughCluster, nil, "",
				[]xdstest.Endpoint{ep("10.96.2.125:8125")}}},
		{"inbound to the resolver's TCP target port", "resolver-0",
			xdstest.Request{Inbound: true, DestinationIP: "10.1.0.5", Port: 5354},
			routeWant{xdstest.OutcomeRouted, VirtualInboundListener, "", "", "inbound|5354||", nil, "",
				[]xdstest.Endpoint{ep("127.0.0.1:5354")}}},
	})
}
