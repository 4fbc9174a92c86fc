package pushcontext

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/meshpilot/meshpilot/pkg/model"
)

type mergedIngresses struct {
	http  []*IngressVirtualHost
	tls   []*IngressTLSHost
	hosts map[string]*hostMerge
	// order lists the hosts sorted, as http does.
	order    []string
	problems map[model.NamespacedName][]string
}

type routeSlot struct {
	route    *IngressRoute
	fallback bool
}

// hostMerge is the merged routing of one host. It is kept for the next
// build, which reuses it whole when it gathers the same input for the host:
// then sorting, deduplication and their problems would come out the same.
type hostMerge struct {
	vhost IngressVirtualHost
	// input is the host's routes in merge order, before sorting.
	input    []routeSlot
	problems []mergeProblem
}

type mergeProblem struct {
	from    model.NamespacedName
	message string
}

// hostInput gathers one host's routes while merging.
type hostInput struct {
	host  string
	slots []routeSlot
}

// mergeIngresses merges translations given oldest first. Rules come before
// defaultBackends, and among each the older Ingress wins a (host, pathType,
// path) or a TLS host; what loses is dropped and reported on its Ingress.
// A defaultBackend also catches what its Ingress's own hosts do not route.
func mergeIngresses(owned []*ingressTranslation, prevHosts map[string]*hostMerge, prevOrder []string) mergedIngresses {
	// Count first, so that every host's slots are carved from one array
	// without ever growing into each other. The previous build's hosts
	// come first, in their sorted order: usually no host is new, and then
	// nothing needs sorting.
	byHost := make(map[string]int32, len(prevOrder))
	inputs := make([]hostInput, len(prevOrder), len(prevOrder)+1)
	counts := make([]int, len(prevOrder), len(prevOrder)+1)
	for i, h := range prevOrder {
		byHost[h] = int32(i)
		inputs[i].host = h
	}
	countHost := func(h string) {
		i, ok := byHost[h]
		if !ok {
			i = int32(len(inputs))
			byHost[h] = i
			inputs = append(inputs, hostInput{host: h})
			counts = append(counts, 0)
		}
		counts[i]++
	}
	total := 0
	for _, t := range owned {
		for _, hr := range t.routes {
			countHost(hr.host)
		}
		total += len(t.routes)
	}
	for _, t := range owned {
		if t.fallback == nil {
			continue
		}
		for _, h := range t.hosts {
			if h != anyHost {
				countHost(h)
				total++
			}
		}
		countHost(anyHost)
		total++
	}
	backing := make([]routeSlot, total)
	off := 0
	for i, n := range counts {
		inputs[i].slots = backing[off : off : off+n]
		off += n
	}
	for _, t := range owned {
		for _, hr := range t.routes {
			in := &inputs[byHost[hr.host]]
			in.slots = append(in.slots, routeSlot{route: hr.route})
		}
	}
	for _, t := range owned {
		if t.fallback == nil {
			continue
		}
		slot := routeSlot{route: t.fallback, fallback: true}
		for _, h := range t.hosts {
			if h != anyHost {
				in := &inputs[byHost[h]]
				in.slots = append(in.slots, slot)
			}
		}
		in := &inputs[byHost[anyHost]]
		in.slots = append(in.slots, slot)
	}
	known := len(prevOrder)
	added := len(inputs) > known
	inputs = slices.DeleteFunc(inputs, func(in hostInput) bool { return len(in.slots) == 0 })
	if added {
		slices.SortFunc(inputs, func(a, b hostInput) int { return compareHosts(a.host, b.host) })
	}

	out := mergedIngresses{
		http:  make([]*IngressVirtualHost, len(inputs)),
		hosts: make(map[string]*hostMerge, len(inputs)),
		order: make([]string, len(inputs)),
	}
	extra := map[model.NamespacedName][]string{}
	for i, in := range inputs {
		hm := prevHosts[in.host]
		if hm == nil || !slices.Equal(hm.input, in.slots) {
			hm = mergeHost(in)
		}
		out.hosts[in.host] = hm
		out.order[i] = in.host
		out.http[i] = &hm.vhost
		for _, p := range hm.problems {
			extra[p.from] = append(extra[p.from], p.message)
		}
	}
	out.tls = mergeTLS(owned, extra)

	out.problems = make(map[model.NamespacedName][]string, len(extra))
	for _, t := range owned {
		more := extra[t.key]
		if len(t.problems) == 0 && len(more) == 0 {
			continue
		}
		if len(more) == 0 {
			out.problems[t.key] = t.problems // sorted when translated
			continue
		}
		list := make([]string, 0, len(t.problems)+len(more))
		list = append(append(list, t.problems...), more...)
		slices.Sort(list)
		out.problems[t.key] = slices.Compact(list)
	}
	return out
}

// mergeHost sorts one host's routes, most specific first, and drops the
// later of two routes for the same match.
func mergeHost(in hostInput) *hostMerge {
	// The input is kept in its own array, not the build's shared one, so
	// that a host reused across many builds holds on to nothing else.
	hm := &hostMerge{input: slices.Clone(in.slots), vhost: IngressVirtualHost{Host: in.host}}
	sorted := slices.Clone(in.slots)
	slices.SortStableFunc(sorted, compareRouteSlots)
	routes := make([]*IngressRoute, 0, len(sorted))
	var last routeSlot
	for j, s := range sorted {
		if j > 0 && s.route.PathType == last.route.PathType && s.route.Path == last.route.Path {
			if p, ok := duplicateRouteProblem(in.host, last, s); ok {
				hm.problems = append(hm.problems, p)
			}
			continue
		}
		routes = append(routes, s.route)
		last = s
	}
	hm.vhost.Routes = slices.Clip(routes)
	return hm
}

// compareHosts sorts hosts by name with the any-host last.
func compareHosts(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == anyHost:
		return 1
	case b == anyHost:
		return -1
	}
	return cmp.Compare(a, b)
}

// compareRouteSlots puts the most specific match first: Kubernetes lets the
// longest matching path win, and Exact win over Prefix at equal length.
// Equal matches keep their merge order, so the first one wins.
func compareRouteSlots(a, b routeSlot) int {
	ra, rb := a.route, b.route
	if c := cmp.Compare(len(rb.Path), len(ra.Path)); c != 0 {
		return c
	}
	if ra.PathType != rb.PathType {
		if ra.PathType == model.PathTypeExact {
			return -1
		}
		return 1
	}
	return cmp.Compare(ra.Path, rb.Path)
}

func duplicateRouteProblem(host string, kept, dropped routeSlot) (mergeProblem, bool) {
	from := dropped.route.From
	switch {
	case !dropped.fallback:
		by := kept.route.From.String()
		if kept.route.From == from {
			by = "an earlier path of this Ingress"
		}
		return mergeProblem{from: from, message: "host " + strconv.Quote(host) + " " + string(dropped.route.PathType) +
			" path " + strconv.Quote(dropped.route.Path) + ": already routed by " + by + "; dropped"}, true
	case host == anyHost && kept.fallback:
		// A defaultBackend shadowed by a rule is what Kubernetes means; two
		// defaultBackends for any host are a conflict.
		return mergeProblem{from: from, message: "defaultBackend: the older Ingress " + kept.route.From.String() +
			" already has a defaultBackend; dropped"}, true
	}
	return mergeProblem{}, false
}

type tlsClaim struct {
	from   model.NamespacedName
	secret model.NamespacedName
}

// mergeTLS gives each TLS host to the oldest Ingress that declares it, since
// the gateway can select only one certificate per SNI name. A later entry
// for the same host with the same Secret is harmless and dropped quietly.
func mergeTLS(owned []*ingressTranslation, extra map[model.NamespacedName][]string) []*IngressTLSHost {
	var out []*IngressTLSHost
	claims := map[string]tlsClaim{}
	for _, t := range owned {
		for _, c := range t.tls {
			// hosts aliases c.hosts until the first host is dropped.
			hosts, trimmed := c.hosts, false
			for i, h := range c.hosts {
				claim, taken := claims[h]
				if !taken {
					claims[h] = tlsClaim{from: t.key, secret: c.secret}
					if trimmed {
						hosts = append(hosts, h)
					}
					continue
				}
				if !trimmed {
					hosts, trimmed = slices.Clone(c.hosts[:i]), true
				}
				if claim.secret != c.secret {
					by := claim.from.String()
					if claim.from == t.key {
						by = "an earlier TLS entry of this Ingress"
					}
					extra[t.key] = append(extra[t.key], "TLS host "+strconv.Quote(h)+" is already served by "+by+
						" with secret "+claim.secret.String()+"; dropped from secret "+c.secret.String())
				}
			}
			if len(hosts) == 0 {
				continue
			}
			out = append(out, &IngressTLSHost{
				Hosts:      hosts,
				SecretName: IngressSecretName(c.secret.Namespace, c.secret.Name),
				Secret:     c.secret,
				From:       t.key,
			})
		}
	}
	slices.SortFunc(out, func(a, b *IngressTLSHost) int {
		return cmp.Or(slices.Compare(a.Hosts, b.Hosts), cmp.Compare(a.From.Namespace, b.From.Namespace),
			cmp.Compare(a.From.Name, b.From.Name))
	})
	return out
}
