package xds

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// aliasOf checks that service alias is routed as target: alias's name is a
// domain of target's virtual host in route 80, and alias has neither a
// virtual host nor a cluster of its own.
func aliasOf(alias, target string) func(xdstest.Snapshot) error {
	return func(s xdstest.Snapshot) error {
		if _, ok := s.Clusters["outbound|80||"+hostname(alias)]; ok {
			return fmt.Errorf("alias %s has a cluster of its own", alias)
		}
		var found bool
		for _, vh := range s.Routes["80"].GetVirtualHosts() {
			switch vh.GetName() {
			case hostname(alias) + ":80":
				return fmt.Errorf("alias %s has a virtual host of its own", alias)
			case hostname(target) + ":80":
				found = slices.Contains(vh.GetDomains(), hostname(alias))
			}
		}
		if !found {
			return fmt.Errorf("%s is no domain of %s's virtual host in route 80", hostname(alias), target)
		}
		return nil
	}
}

// TestEnvoyWarmsWithAliases: an Envoy sidecar warms fully while an
// ExternalName Service is an alias of a mesh Service, is re-pointed at
// another, falls back to a DNS cluster when its target goes, and becomes
// an alias again when the target comes back: each step a push of the
// alias's or the target's change alone.
func TestEnvoyWarmsWithAliases(t *testing.T) {
	for _, mode := range []xdstest.Mode{xdstest.SotW, xdstest.Delta} {
		t.Run(mode.String(), func(t *testing.T) {
			h := newHarness(t, harnessConfig{seed: func(s model.Store) {
				seedWarming(s)
				upsertExternalName(s, "alias", nil, hostname("a"))
			}, generators: warmingGenerators()})
			c := xdstest.NewEnvoyClient(t, h.dial(), envoyNode(t, "client"), mode)
			c.RequireWarm(10*time.Second, all(aliasOf("alias", "a"), hasEndpoints("a", 1)))

			upsertExternalName(h.store, "alias", nil, hostname("b")+".")
			c.RequireWarm(10*time.Second, all(aliasOf("alias", "b"), hasEndpoints("b", 1)))

			h.store.DeleteService(serviceKey("b"))
			c.RequireWarm(10*time.Second, resolves("alias", hostname("b")+"."))

			upsertService(h.store, "b", nil, nil)
			setHTTPEndpoints(h.store, "b", "10.8.0.2")
			c.RequireWarm(10*time.Second, all(aliasOf("alias", "b"), hasEndpoints("b", 1)))
		})
	}
}
