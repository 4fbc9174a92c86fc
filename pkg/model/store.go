package model

import (
	"cmp"
	"slices"
	"strings"
	"sync"
)

// Store holds everything the sources have read, as model types. Sources write
// it; the push context builder reads it. Every mutation that changes what the
// store holds is announced to the handlers, after the store's lock is released,
// except a workload change no proxy can see (see Workload.proxyVisible): its
// effect reaches proxies through the endpoints the sources re-emit, and the
// push context needs no rebuild for it.
type Store interface {
	UpsertService(*Service)
	DeleteService(NamespacedName)
	// SetEndpoints replaces the endpoints that one EndpointSlice (named by
	// slice) contributes to a service. An empty list removes the slice.
	SetEndpoints(service NamespacedName, slice string, endpoints []*Endpoint)
	UpsertWorkload(*Workload)
	DeleteWorkload(NamespacedName)
	UpsertNamespace(*Namespace)
	DeleteNamespace(name string)
	UpsertConfig(*Config)
	DeleteConfig(ConfigKey)
	UpsertIngress(*Ingress)
	DeleteIngress(NamespacedName)
	// SetIngressStatus replaces the LoadBalancer of a stored Ingress and
	// keeps the rest, its Revision included, so that cached translations
	// stay valid; it announces KindIngressStatus, not KindIngress. It does
	// nothing for an Ingress not stored.
	SetIngressStatus(NamespacedName, []LoadBalancerIngress)
	UpsertIngressClass(*IngressClass)
	DeleteIngressClass(name string)
	UpsertSecret(*Secret)
	DeleteSecret(NamespacedName)
	// SetSourceProblems replaces the problems one source reports (see
	// SourceProblem); an empty list clears them.
	SetSourceProblems(source string, problems []SourceProblem)

	// Services returns every service sorted by hostname. The slice is
	// shared until the next service change: never mutate it.
	Services() []*Service
	Service(NamespacedName) *Service
	// Endpoints returns the endpoints of a service from all of its slices,
	// ordered by slice name then by position. The slice is shared until the
	// service's endpoints change: never mutate it.
	Endpoints(service NamespacedName) []*Endpoint
	Workloads() []*Workload
	Namespaces() []*Namespace
	// Namespace returns the named namespace, nil when unknown.
	Namespace(name string) *Namespace
	Configs(Kind) []*Config
	// Ingresses returns every Ingress, oldest first (ties by namespace and
	// name), the order in which Ingresses sharing a host are merged. The
	// slice is shared until the next Ingress change: never mutate it.
	Ingresses() []*Ingress
	Ingress(NamespacedName) *Ingress
	IngressClasses() []*IngressClass
	Secret(NamespacedName) *Secret
	// SecretsNamed returns the Secrets called name, in every namespace,
	// sorted by namespace.
	SecretsNamed(name string) []*Secret
	// SourceProblems returns every source's problems, sorted by source,
	// file and line.
	SourceProblems() []SourceProblem

	// OnChange registers a handler for every change. Handlers run on the
	// writer's goroutine and must not block.
	OnChange(func(ConfigKey))
}

// NewStore returns an empty in-memory Store.
func NewStore() Store {
	return &memStore{
		services:   map[NamespacedName]*Service{},
		endpoints:  map[NamespacedName]*endpointSet{},
		workloads:  map[NamespacedName]*Workload{},
		namespaces: map[string]*Namespace{},
		configs:    map[ConfigKey]*Config{},
		ingresses:  map[NamespacedName]*Ingress{},
		classes:    map[string]*IngressClass{},
		secrets:    map[NamespacedName]*Secret{},

		sourceProblems: map[string][]SourceProblem{},
	}
}

type memStore struct {
	mu       sync.RWMutex
	services map[NamespacedName]*Service
	// sortedServices caches Services(); nil after any service change. Push
	// context builds read it far more often than services change.
	sortedServices []*Service
	endpoints      map[NamespacedName]*endpointSet
	workloads      map[NamespacedName]*Workload
	namespaces     map[string]*Namespace
	configs        map[ConfigKey]*Config
	ingresses      map[NamespacedName]*Ingress
	// sortedIngresses caches Ingresses(); nil after any Ingress change.
	sortedIngresses []*Ingress
	classes         map[string]*IngressClass
	secrets         map[NamespacedName]*Secret
	sourceProblems  map[string][]SourceProblem

	handlersMu sync.RWMutex
	handlers   []func(ConfigKey)
}

func (s *memStore) OnChange(h func(ConfigKey)) {
	s.handlersMu.Lock()
	defer s.handlersMu.Unlock()
	s.handlers = append(s.handlers, h)
}

func (s *memStore) notify(key ConfigKey) {
	s.handlersMu.RLock()
	defer s.handlersMu.RUnlock()
	for _, h := range s.handlers {
		h(key)
	}
}

func (s *memStore) write(key ConfigKey, mutate func() bool) {
	s.mu.Lock()
	changed := mutate()
	s.mu.Unlock()
	if changed {
		s.notify(key)
	}
}

func (s *memStore) UpsertService(svc *Service) {
	s.write(ConfigKey{KindService, svc.Namespace, svc.Name}, func() bool {
		s.services[svc.Key()] = svc
		s.sortedServices = nil
		return true
	})
}

func (s *memStore) DeleteService(n NamespacedName) {
	s.write(ConfigKey{KindService, n.Namespace, n.Name}, func() bool {
		_, ok := s.services[n]
		delete(s.services, n)
		s.sortedServices = nil
		return ok
	})
}

// endpointSet is a service's endpoints by EndpointSlice, plus their
// concatenation, rebuilt on write because reads far outnumber writes. A
// service has few slices, most only one, so they are kept in a short list
// sorted by name rather than a map, and a lone slice's endpoints are the
// concatenation: at 5,000 services, the maps and copies took 2 MB.
type endpointSet struct {
	slices []sliceEndpoints
	all    []*Endpoint
}

type sliceEndpoints struct {
	name      string
	endpoints []*Endpoint
}

// set replaces the endpoints of one slice (none removes it) and reports
// whether the set changed.
func (e *endpointSet) set(slice string, eps []*Endpoint) bool {
	i, found := slices.BinarySearchFunc(e.slices, slice, func(s sliceEndpoints, name string) int {
		return strings.Compare(s.name, name)
	})
	switch {
	case len(eps) > 0 && found:
		e.slices[i].endpoints = eps
	case len(eps) > 0:
		e.slices = slices.Insert(e.slices, i, sliceEndpoints{name: slice, endpoints: eps})
	case found:
		e.slices = slices.Delete(e.slices, i, i+1)
	default:
		return false
	}
	e.flatten()
	return true
}

func (e *endpointSet) flatten() {
	if len(e.slices) == 1 {
		e.all = e.slices[0].endpoints
		return
	}
	total := 0
	for _, s := range e.slices {
		total += len(s.endpoints)
	}
	all := make([]*Endpoint, 0, total)
	for _, s := range e.slices {
		all = append(all, s.endpoints...)
	}
	e.all = all
}

func (s *memStore) SetEndpoints(svc NamespacedName, slice string, eps []*Endpoint) {
	s.write(ConfigKey{KindEndpoints, svc.Namespace, svc.Name}, func() bool {
		set := s.endpoints[svc]
		if set == nil {
			if len(eps) == 0 {
				return false
			}
			set = &endpointSet{}
			s.endpoints[svc] = set
		}
		if !set.set(slice, eps) {
			return false
		}
		if len(set.slices) == 0 {
			delete(s.endpoints, svc)
		}
		return true
	})
}

func (s *memStore) UpsertWorkload(w *Workload) {
	s.write(ConfigKey{KindWorkload, w.Namespace, w.Name}, func() bool {
		old := s.workloads[w.Key()]
		s.workloads[w.Key()] = w
		return w.proxyVisible(old)
	})
}

func (s *memStore) DeleteWorkload(n NamespacedName) {
	s.write(ConfigKey{KindWorkload, n.Namespace, n.Name}, func() bool {
		old, ok := s.workloads[n]
		delete(s.workloads, n)
		return ok && len(old.IPs) > 0
	})
}

func (s *memStore) UpsertNamespace(ns *Namespace) {
	s.write(ConfigKey{Kind: KindNamespace, Name: ns.Name}, func() bool {
		s.namespaces[ns.Name] = ns
		return true
	})
}

func (s *memStore) DeleteNamespace(name string) {
	s.write(ConfigKey{Kind: KindNamespace, Name: name}, func() bool {
		_, ok := s.namespaces[name]
		delete(s.namespaces, name)
		return ok
	})
}

func (s *memStore) UpsertConfig(c *Config) {
	s.write(c.Key(), func() bool {
		s.configs[c.Key()] = c
		return true
	})
}

func (s *memStore) DeleteConfig(k ConfigKey) {
	s.write(k, func() bool {
		_, ok := s.configs[k]
		delete(s.configs, k)
		return ok
	})
}

func (s *memStore) Services() []*Service {
	s.mu.RLock()
	sorted := s.sortedServices
	s.mu.RUnlock()
	if sorted != nil {
		return sorted
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sortedServices == nil {
		out := make([]*Service, 0, len(s.services))
		for _, svc := range s.services {
			out = append(out, svc)
		}
		slices.SortFunc(out, func(a, b *Service) int { return cmp.Compare(a.Hostname, b.Hostname) })
		s.sortedServices = out
	}
	return s.sortedServices
}

func (s *memStore) Service(n NamespacedName) *Service {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.services[n]
}

func (s *memStore) Endpoints(svc NamespacedName) []*Endpoint {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if set := s.endpoints[svc]; set != nil {
		return set.all
	}
	return nil
}

func (s *memStore) Workloads() []*Workload {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Workload, 0, len(s.workloads))
	for _, w := range s.workloads {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b *Workload) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func (s *memStore) Namespaces() []*Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Namespace, 0, len(s.namespaces))
	for _, ns := range s.namespaces {
		out = append(out, ns)
	}
	slices.SortFunc(out, func(a, b *Namespace) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (s *memStore) Namespace(name string) *Namespace {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.namespaces[name]
}

// Configs returns the configs of one kind, oldest first (ties by namespace
// and name), the order Istio's merge rules depend on.
func (s *memStore) Configs(kind Kind) []*Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Config
	for k, c := range s.configs {
		if k.Kind == kind {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *Config) int {
		return cmp.Or(a.CreationTime.Compare(b.CreationTime),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func (s *memStore) UpsertIngress(ing *Ingress) {
	s.write(ConfigKey{KindIngress, ing.Namespace, ing.Name}, func() bool {
		s.ingresses[ing.Key()] = ing
		s.sortedIngresses = nil
		return true
	})
}

func (s *memStore) SetIngressStatus(n NamespacedName, lbs []LoadBalancerIngress) {
	s.write(ConfigKey{KindIngressStatus, n.Namespace, n.Name}, func() bool {
		old, ok := s.ingresses[n]
		if !ok {
			return false
		}
		// A copy: readers may hold the stored Ingress.
		ing := *old
		ing.LoadBalancer = lbs
		s.ingresses[n] = &ing
		s.sortedIngresses = nil
		return true
	})
}

func (s *memStore) DeleteIngress(n NamespacedName) {
	s.write(ConfigKey{KindIngress, n.Namespace, n.Name}, func() bool {
		_, ok := s.ingresses[n]
		delete(s.ingresses, n)
		s.sortedIngresses = nil
		return ok
	})
}

func (s *memStore) UpsertIngressClass(c *IngressClass) {
	s.write(ConfigKey{Kind: KindIngressClass, Name: c.Name}, func() bool {
		s.classes[c.Name] = c
		return true
	})
}

func (s *memStore) DeleteIngressClass(name string) {
	s.write(ConfigKey{Kind: KindIngressClass, Name: name}, func() bool {
		_, ok := s.classes[name]
		delete(s.classes, name)
		return ok
	})
}

func (s *memStore) UpsertSecret(sec *Secret) {
	s.write(ConfigKey{KindSecret, sec.Namespace, sec.Name}, func() bool {
		s.secrets[sec.Key()] = sec
		return true
	})
}

func (s *memStore) DeleteSecret(n NamespacedName) {
	s.write(ConfigKey{KindSecret, n.Namespace, n.Name}, func() bool {
		_, ok := s.secrets[n]
		delete(s.secrets, n)
		return ok
	})
}

func (s *memStore) Ingresses() []*Ingress {
	s.mu.RLock()
	sorted := s.sortedIngresses
	s.mu.RUnlock()
	if sorted != nil {
		return sorted
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sortedIngresses == nil {
		out := make([]*Ingress, 0, len(s.ingresses))
		for _, ing := range s.ingresses {
			out = append(out, ing)
		}
		slices.SortFunc(out, func(a, b *Ingress) int {
			if c := a.CreationTime.Compare(b.CreationTime); c != 0 {
				return c
			}
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		s.sortedIngresses = out
	}
	return s.sortedIngresses
}

func (s *memStore) Ingress(n NamespacedName) *Ingress {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ingresses[n]
}

func (s *memStore) IngressClasses() []*IngressClass {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*IngressClass, 0, len(s.classes))
	for _, c := range s.classes {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *IngressClass) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (s *memStore) Secret(n NamespacedName) *Secret {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.secrets[n]
}

func (s *memStore) SecretsNamed(name string) []*Secret {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Secret
	for key, sec := range s.secrets {
		if key.Name == name {
			out = append(out, sec)
		}
	}
	slices.SortFunc(out, func(a, b *Secret) int { return cmp.Compare(a.Namespace, b.Namespace) })
	return out
}
