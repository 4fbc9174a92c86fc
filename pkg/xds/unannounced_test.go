package xds

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// TestServiceChangesReadBeforeTheirAnnouncement: the store is readable
// before its change handlers run, so the build for one Service change can
// read a later write of another Service before that write is announced.
// The push of the first change must tell the proxies that saw the other
// Service before: when the other's own announcement comes, both snapshots
// its push compares hold the new state, and a proxy that could see the
// Service only before (it was deleted, or is no longer exported to the
// proxy's namespace) would never be pushed, and keep its cluster.
func TestServiceChangesReadBeforeTheirAnnouncement(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(model.Store)
	}{
		{"deleted", func(s model.Store) { s.DeleteService(serviceKey("shared")) }},
		{"no longer exported", func(s model.Store) { upsertService(s, "shared", model.ExportTo{"default"}, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{noStoreHandler: true, generators: stampedGenerators(), seed: func(s model.Store) {
				upsertService(s, "shared", nil, nil)
				upsertService(s, "private", model.ExportTo{"default"}, nil)
			}})
			sharedCluster := "cluster:" + hostname("shared") + "@"
			holdsShared := func(values []string) bool {
				for _, v := range values {
					if strings.HasPrefix(v, sharedCluster) {
						return true
					}
				}
				return false
			}
			other := h.sotwAs("other", nodeIn("other", "other", nil))
			cds := other.subscribe(ClusterType)
			if !holdsShared(names(cds.GetResources(), resourceName)) {
				t.Fatalf("the proxy in other does not see shared at first: the test proves nothing")
			}
			other.ack(cds)
			other.expectQuiet("after the ACK")

			// Both writes land before the first build; only the change of
			// private, which the proxy in other cannot see, is announced.
			tc.change(h.store)
			upsertService(h.store, "private", model.ExportTo{"default"}, map[string]string{"tier": "gold"})
			h.pushNow(model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "private"}, time.Now()))
			h.pushNow(model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "shared"}, time.Now()))

			var clusters []string
			pushed := false
			for _, r := range other.barrier() {
				if r.GetTypeUrl() == ClusterType {
					clusters, pushed = names(r.GetResources(), resourceName), true
				}
			}
			if !pushed || holdsShared(clusters) {
				t.Fatalf("the proxy in other still holds shared's cluster (pushed CDS: %v, %v)", pushed, clusters)
			}
		})
	}
}

// TestIngressFollowsServicesReadBeforeTheirAnnouncement: the same for the
// ingress gateway, whose routes come from an index of its own. The build
// for the change of private reads the deletion of a, which an Ingress
// routes to: that build's routes must lose a, since the push of a's own
// announcement compares two snapshots without a and tells the gateway
// nothing.
func TestIngressFollowsServicesReadBeforeTheirAnnouncement(t *testing.T) {
	h := newHarness(t, harnessConfig{noStoreHandler: true, generators: warmingGenerators(), seed: func(s model.Store) {
		upsertService(s, "a", nil, nil)
		setHTTPEndpoints(s, "a", "10.8.0.1")
		upsertService(s, "private", model.ExportTo{"default"}, nil)
		upsertGatewayService(s, 8443)
		s.UpsertIngressClass(&model.IngressClass{Name: "istio", Controller: model.IngressController})
		upsertIngress(s, "/a")
	}})
	clusterA := "outbound|80||" + hostname("a")
	routesToA := func(s xdstest.Snapshot) bool {
		for _, rc := range s.Routes {
			for _, vh := range rc.GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if r.GetRoute().GetCluster() == clusterA {
						return true
					}
				}
			}
		}
		return false
	}
	gateway := xdstest.NewEnvoyClient(t, h.dial(), gatewayNode(), xdstest.SotW)
	gateway.RequireWarm(waitLimit, func(s xdstest.Snapshot) error {
		if !routesToA(s) {
			return fmt.Errorf("no route to %s yet", clusterA)
		}
		return nil
	})

	h.store.DeleteService(serviceKey("a"))
	upsertService(h.store, "private", model.ExportTo{"default"}, map[string]string{"tier": "gold"})
	h.pushNow(model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "private"}, time.Now()))
	h.pushNow(model.NewPushRequest(model.ConfigKey{Kind: model.KindService, Namespace: "default", Name: "a"}, time.Now()))
	gateway.RequireWarm(waitLimit, func(s xdstest.Snapshot) error {
		if routesToA(s) {
			return fmt.Errorf("the gateway still routes to %s", clusterA)
		}
		return nil
	})
}
