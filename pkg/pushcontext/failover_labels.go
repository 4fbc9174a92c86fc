package pushcontext

import (
	"slices"
	"strings"

	networking "istio.io/api/networking/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// FailoverPriorityLabels lists, sorted, the label keys that some
// DestinationRule's failoverPriority compares between a proxy and the
// endpoints (an entry "key=value" compares a fixed value, not the proxy's
// label, and is left out). Proxies that differ in these labels may get
// different load-assignment priorities, so they must not share them.
func (pc *PushContext) FailoverPriorityLabels() []string { return pc.rules.failoverLabels }

func failoverPriorityLabels(configs []*model.Config) []string {
	var keys []string
	addPolicy := func(tp *networking.TrafficPolicy) {
		settings := []*networking.LoadBalancerSettings{tp.GetLoadBalancer()}
		for _, pl := range tp.GetPortLevelSettings() {
			settings = append(settings, pl.GetLoadBalancer())
		}
		for _, lb := range settings {
			for _, entry := range lb.GetLocalityLbSetting().GetFailoverPriority() {
				if !strings.Contains(entry, "=") {
					keys = append(keys, entry)
				}
			}
		}
	}
	for _, cfg := range configs {
		spec, ok := cfg.Spec.(*networking.DestinationRule)
		if !ok {
			continue
		}
		addPolicy(spec.GetTrafficPolicy())
		for _, s := range spec.GetSubsets() {
			addPolicy(s.GetTrafficPolicy())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
