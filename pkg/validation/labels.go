package validation

import (
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// objectMeta checks what every namespaced Istio config shares: a DNS-1123
// subdomain name in a DNS-1123 label namespace.
func (p *problems) objectMeta(name, namespace string) {
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		p.add("metadata.name", "%s", msg)
	}
	for _, msg := range validation.IsDNS1123Label(namespace) {
		p.add("metadata.namespace", "%s", msg)
	}
}

// labels checks labels that select workloads by exact match (subset labels,
// workload selectors). An empty key or a "*" would never match a real label,
// and Istio refuses both, so they get a message of their own rather than
// the generic syntax one. Keys are visited in order so the problems read
// the same on every run.
func (p *problems) labels(path string, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		switch {
		case k == "":
			p.add(path, "empty label key (with value %q)", v)
		case strings.Contains(k, "*"):
			p.add(path, "key %q: wildcards are not supported in a selector", k)
		default:
			for _, msg := range validation.IsQualifiedName(k) {
				p.add(path, "key %q: %s", k, msg)
			}
		}
		if strings.Contains(v, "*") {
			p.add(path, "value of %q: wildcards are not supported in a selector", k)
			continue
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			p.add(path, "value of %q: %s", k, msg)
		}
	}
}
