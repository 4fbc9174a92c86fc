package envoygen

import (
	"testing"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// TestSimulationLocality: which endpoints take a client's traffic under
// locality load balancing, by Istio's rules and Envoy's priorities
// (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/priority):
// Envoy sends everything to the lowest priority that is healthy, so the
// table lists priority 0's endpoints.
//
// failover (with outlier detection): priority by how much locality an
// endpoint shares with the client (region, zone, subzone all; region and
// zone; region), then the failover region of the client's region, then
// the rest, renumbered without gaps. failoverPriority [tier, region]:
// priority 0 matches both labels, 1 the tier only, 2 the others (a label
// counts only when the ones before it match). distribute: the client's
// entry sets each locality's weight; localities it omits get nothing.
func TestSimulationLocality(t *testing.T) {
	sims := simulations(t, "locality")
	req := func(svc, ip string) xdstest.Request {
		return xdstest.Request{DestinationIP: ip, Port: 80, Host: svc + ".app.svc.cluster.local", Path: "/"}
	}
	routed := func(svc string, eps ...xdstest.Endpoint) routeWant {
		return routeWant{xdstest.OutcomeRouted, "0.0.0.0_80", "80", svc + ".app.svc.cluster.local:80",
			"outbound|80||" + svc + ".app.svc.cluster.local", nil, "", eps}
	}
	// Istio turns on Envoy's locality weighted load balancing only for a
	// failover that can happen (outlier detection set) and for distribute,
	// and weighs a locality by its endpoint count: here one each.
	p0 := func(addr string) xdstest.Endpoint { return xdstest.Endpoint{Address: addr, LocalityWeight: 1} }
	weighted := func(addr string, w uint32) xdstest.Endpoint {
		return xdstest.Endpoint{Address: addr, LocalityWeight: w}
	}
	runRouteCases(t, sims, []routeCase{
		{"failover: same region, zone and subzone first", "east-client", req("api", "10.96.1.1"),
			routed("api", p0("10.2.0.1:8080"))},
		{"failover: a client elsewhere prefers its own locality", "west-client", req("api", "10.96.1.1"),
			routed("api", p0("10.2.0.3:8080"))},
		{"failover: eu-west client", "eu-client", req("api", "10.96.1.1"),
			routed("api", p0("10.2.0.4:8080"))},
		{"failover: own zone gone, the region's other zone", "east-client", req("api-a-gone", "10.96.1.2"),
			routed("api-a-gone", p0("10.2.0.2:8080"))},
		{"failover: own region gone, the failover region before any other", "east-client", req("api-east-gone", "10.96.1.3"),
			routed("api-east-gone", p0("10.2.0.4:8080"))},
		{"failover: the rule's from does not cover us-west", "west-client", req("api-east-gone", "10.96.1.3"),
			routed("api-east-gone", p0("10.2.0.3:8080"))},
		// Without outlier detection Envoy could never fail over, so Istio
		// sets no priorities and no locality weights.
		{"failover without outlier detection: one priority", "east-client", req("api-no-outlier", "10.96.1.7"),
			routed("api-no-outlier", ep("10.2.0.1:8080"), ep("10.2.0.2:8080"), ep("10.2.0.3:8080"), ep("10.2.0.4:8080"))},
		// enabled: false leaves neither priorities nor locality weights.
		{"locality load balancing off", "east-client", req("api-off", "10.96.1.8"),
			routed("api-off", ep("10.2.0.1:8080"), ep("10.2.0.2:8080"), ep("10.2.0.3:8080"), ep("10.2.0.4:8080"))},
		{"distribute: weights of the client's entry, eu-west left out", "east-client", req("dist", "10.96.1.4"),
			routed("dist", weighted("10.2.0.1:8080", 80), weighted("10.2.0.3:8080", 20))},
		{"failoverPriority: tier and region match", "east-client", req("tiered", "10.96.1.5"),
			routed("tiered", p0("10.3.0.1:8080"))},
		{"failoverPriority: same locality, other tier", "east-silver-client", req("tiered", "10.96.1.5"),
			routed("tiered", p0("10.3.0.2:8080"))},
		{"failoverPriority: tier before region", "west-client", req("tiered", "10.96.1.5"),
			routed("tiered", p0("10.3.0.2:8080"))},
		{"failoverPriority: best match gone, the tier in another region", "east-client", req("tiered-gold-east-gone", "10.96.1.6"),
			routed("tiered-gold-east-gone", p0("10.3.0.3:8080"))},
	})
}
