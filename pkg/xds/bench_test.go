package xds

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// BenchmarkEndpointPushToClients measures one endpoint-only push, from the
// push loop's fast path to every client holding the new ClusterLoadAssignment,
// with 200 services and 20 SotW clients watching all of their EDS. The
// debounce delay is excluded (the benchmark pushes directly).
func BenchmarkEndpointPushToClients(b *testing.B) {
	const services, clients = 200, 20
	h := newHarness(b, harnessConfig{noStoreHandler: true, seed: func(s model.Store) {
		for i := range services {
			addService(s, fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.4.%d.%d", i/250, i%250+1))
		}
	}})
	var all []string
	for i := range services {
		all = append(all, hostname(fmt.Sprintf("svc-%d", i)))
	}
	conns := make([]*sotwClient, clients)
	for i := range conns {
		c := h.sotw(fmt.Sprintf("client-%d", i))
		c.ack(c.subscribe(EndpointType, all...), all...)
		conns[i] = c
	}

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("svc-%d", i%services)
		setEndpoints(h.store, name, fmt.Sprintf("10.5.0.%d", i%250+1))
		h.server.push(model.NewPushRequest(model.ConfigKey{Kind: model.KindEndpoints, Namespace: "default", Name: name}, time.Now()))
		for _, c := range conns {
			r := c.expect(EndpointType)
			if len(r.GetResources()) != 1 {
				b.Fatalf("incremental push carried %d resources, want 1", len(r.GetResources()))
			}
		}
	}
}

// BenchmarkLoneEndpointChange measures what a proxy feels when one
// EndpointSlice changes after a quiet period: from the store write, through
// the store's change handler and the push loop, to the client holding the
// new ClusterLoadAssignment. Such a change is not held for the debounce
// period. Between ops the benchmark waits out the quiet period (2 ms here),
// untimed, so every change is a lone one.
func BenchmarkLoneEndpointChange(b *testing.B) {
	const quiet = 2 * time.Millisecond
	h := newHarness(b, harnessConfig{seed: seedAB, debounceAfter: quiet, debounceMax: time.Second})
	c := h.sotw("client")
	c.ack(c.subscribe(EndpointType, hostname("a")), hostname("a"))

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		time.Sleep(2 * quiet)
		b.StartTimer()
		setEndpoints(h.store, "a", "10.1.0.1", fmt.Sprintf("10.6.%d.%d", i/250%250, i%250+1))
		r := c.expect(EndpointType)
		b.StopTimer()
		c.ack(r, hostname("a"))
		b.StartTimer()
	}
}
