package bootstrap

import (
	"slices"
	"testing"
)

// TestServiceDNSNames: both TLS listeners (15012 and the webhooks) are
// certified for the Service as clients name it, short to full, with the
// revision and the cluster's domain suffix.
func TestServiceDNSNames(t *testing.T) {
	for _, tc := range []struct {
		name, revision, service, suffix string
		want                            []string
	}{
		{name: "default revision", want: []string{"istiod", "istiod.mesh-system", "istiod.mesh-system.svc", "istiod.mesh-system.svc.cluster.local"}},
		{name: "canary", revision: "canary", want: []string{"istiod-canary", "istiod-canary.mesh-system", "istiod-canary.mesh-system.svc", "istiod-canary.mesh-system.svc.cluster.local"}},
		{name: "named service and suffix", service: "pilot", suffix: "corp.example", want: []string{"pilot", "pilot.mesh-system", "pilot.mesh-system.svc", "pilot.mesh-system.svc.corp.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := DefaultOptions()
			opts.Webhook.Namespace, opts.Revision, opts.Webhook.Service = "mesh-system", tc.revision, tc.service
			if tc.suffix != "" {
				opts.DomainSuffix = tc.suffix
			}
			if got := (&Server{opts: opts}).serviceDNSNames(); !slices.Equal(got, tc.want) {
				t.Errorf("names %v, want %v", got, tc.want)
			}
		})
	}
}
