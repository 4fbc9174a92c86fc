package pushcontext

import (
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Options are the mesh-wide settings that shape the indexes.
type Options struct {
	DomainSuffix  string // "cluster.local"
	RootNamespace string // "istio-system"
	// Ingress says which Kubernetes Ingresses the ingress gateway serves.
	Ingress IngressOptions
	// TrustDomain names workload identities (spiffe://<trust domain>/...).
	TrustDomain string
	// DisableAutoMTLS turns off auto mTLS (the mesh's enableAutoMtls:
	// false): clients then use mutual TLS only where a DestinationRule
	// says ISTIO_MUTUAL.
	DisableAutoMTLS bool
	// ClusterID names this cluster in the uids of workloads that WDS
	// serves (default "Kubernetes", Istio's).
	ClusterID string
	// SystemNamespace is the control plane's own namespace (default
	// "istio-system"); its topology.istio.io/network label names the
	// cluster's network.
	SystemNamespace string
}

const (
	defaultDomainSuffix    = "cluster.local"
	defaultRootNamespace   = "istio-system"
	defaultSystemNamespace = "istio-system"
	defaultTrustDomain     = "cluster.local"
)

func (o Options) withDefaults() Options {
	if o.DomainSuffix == "" {
		o.DomainSuffix = defaultDomainSuffix
	}
	if o.RootNamespace == "" {
		o.RootNamespace = defaultRootNamespace
	}
	if o.TrustDomain == "" {
		o.TrustDomain = defaultTrustDomain
	}
	if o.ClusterID == "" {
		o.ClusterID = defaultClusterID
	}
	if o.SystemNamespace == "" {
		o.SystemNamespace = defaultSystemNamespace
	}
	o.Ingress = o.Ingress.withDefaults()
	return o
}

// equal compares options that went through withDefaults.
func (o Options) equal(p Options) bool {
	return o.DomainSuffix == p.DomainSuffix && o.RootNamespace == p.RootNamespace && o.Ingress.equal(p.Ingress) &&
		o.TrustDomain == p.TrustDomain && o.DisableAutoMTLS == p.DisableAutoMTLS && o.ClusterID == p.ClusterID &&
		o.SystemNamespace == p.SystemNamespace
}

// PushContext is an immutable snapshot of the store with precomputed indexes.
// Every method is safe for concurrent use. Only UpdateEndpoints changes what
// readers see, and it does so by atomically swapping per-service entries;
// ReportProblem records, and a few lookups fill caches, without locks on the
// read path.
type PushContext struct {
	opts      Options
	seq       uint64
	version   string
	buildTime time.Time
	// buildDuration is how long Build took, for the debug summary.
	buildDuration time.Duration

	services   *serviceIndex
	rules      *ruleIndex
	resolution *resolutionIndex
	endpoints  *endpointIndex
	workloads  *workloadIndex
	targets    *targetIndex
	ingress    *ingressIndex
	// credentials depends on DestinationRules and Secrets.
	credentials *credentialIndex
	peerAuthn   *peerAuthnIndex
	// virtualServices depends on VirtualServices only.
	virtualServices *virtualServiceIndex
	// addresses is what workload discovery reads (addresses.go).
	addresses *addressIndex

	// versions hands out endpoint entry versions. The whole chain of
	// snapshots built from one another shares it, so a version never repeats
	// for a host while generators may still cache by it.
	versions *versionSource
	build    BuildInfo

	// translation is the only state written after Build: what generators
	// report they could not translate.
	translation translationProblems
	// ruleChanges memoises RuleChanges.
	ruleChanges atomic.Pointer[ruleChangesMemo]
	// sourceProblems are what the sources could not read, for the summary.
	sourceProblems []model.SourceProblem
}

// versionSource is only touched by the push loop (Build and
// UpdateEndpoints run on one goroutine), so it needs no synchronisation.
type versionSource struct{ last uint64 }

func (v *versionSource) next() uint64 {
	v.last++
	return v.last
}

// TrustDomain is the trust domain of workload identities.
func (pc *PushContext) TrustDomain() string { return pc.opts.TrustDomain }

// AutoMTLS reports whether clients send mutual TLS, without a
// DestinationRule saying so, to servers that can take it.
func (pc *PushContext) AutoMTLS() bool { return !pc.opts.DisableAutoMTLS }

// Version is unique per snapshot: the build time and a counter that grows
// along the chain of snapshots built from one another.
func (pc *PushContext) Version() string { return pc.version }

// ServiceForHostname returns the service with the given hostname, or nil.
func (pc *PushContext) ServiceForHostname(host string) *model.Service {
	if i, ok := pc.services.byHost[host]; ok {
		return pc.services.all[i]
	}
	return nil
}

// ServiceByName returns the named service, or nil.
func (pc *PushContext) ServiceByName(namespace, name string) *model.Service {
	if i, ok := pc.services.byName[model.NamespacedName{Namespace: namespace, Name: name}]; ok {
		return pc.services.all[i]
	}
	return nil
}

// ServicesVisibleTo returns the services whose ExportTo allows namespace ns,
// sorted by hostname. The slice is shared: never mutate it.
func (pc *PushContext) ServicesVisibleTo(ns string) []*model.Service {
	return pc.services.visibleTo(ns)
}

// Services returns every service, sorted by hostname. The slice is shared.
func (pc *PushContext) Services() []*model.Service { return pc.services.all }

// Build makes a new immutable snapshot from the store. When prev and req are
// non-nil and req lists ConfigsUpdated, indexes whose inputs did not change
// are reused from prev. Build must not run concurrently with itself or with
// UpdateEndpoints.
func Build(store model.Store, opts Options, prev *PushContext, req *model.PushRequest) *PushContext {
	opts = opts.withDefaults()
	plan := planBuild(opts, prev, req)
	pc := &PushContext{opts: opts, buildTime: time.Now()}
	if plan.full {
		pc.versions = &versionSource{last: uint64(pc.buildTime.UnixNano())}
		pc.seq = 1
		if prev != nil {
			// Keep the chain's counters so versions stay unique across a
			// forced full rebuild too.
			pc.versions = prev.versions
			pc.seq = prev.seq + 1
		}
	} else {
		pc.versions = prev.versions
		pc.seq = prev.seq + 1
	}
	pc.version = pc.buildTime.UTC().Format(time.RFC3339Nano) + "/" + strconv.FormatUint(pc.seq, 10)
	pc.build.Full = plan.full

	if plan.full || plan.services {
		pc.services = buildServiceIndex(store.Services())
		pc.build.rebuilt(indexServices)
	} else {
		pc.services = prev.services
		pc.build.reused(indexServices)
	}

	if plan.full || plan.rules {
		pc.rules = buildRuleIndex(store.Configs(model.KindDestinationRule), opts)
		pc.build.rebuilt(indexDestinationRules)
	} else {
		pc.rules = prev.rules
		pc.build.reused(indexDestinationRules)
	}

	resolutionChanged := plan.full || plan.services || plan.rules
	if resolutionChanged {
		pc.resolution = buildResolutionIndex(pc.services, pc.rules, opts.RootNamespace)
		pc.build.rebuilt(indexResolution)
	} else {
		pc.resolution = prev.resolution
		pc.build.reused(indexResolution)
	}

	// Read (and sorted) once per build, for the two indexes made of them.
	var workloads []*model.Workload
	if plan.full || plan.workloads {
		workloads = store.Workloads()
		pc.workloads = buildWorkloadIndex(workloads)
		pc.build.rebuilt(indexWorkloads)
	} else {
		pc.workloads = prev.workloads
		pc.build.reused(indexWorkloads)
	}

	// The cache of service targets holds workloads, so it goes when they do.
	if plan.full || plan.services || plan.workloads {
		pc.targets = buildTargetIndex(pc.services)
		pc.build.rebuilt(indexServiceTargets)
	} else {
		pc.targets = prev.targets
		pc.build.reused(indexServiceTargets)
	}

	if plan.full || plan.peerAuthn {
		pc.peerAuthn = buildPeerAuthnIndex(store.Configs(model.KindPeerAuthentication), opts.RootNamespace)
		pc.build.rebuilt(indexPeerAuthentication)
	} else {
		pc.peerAuthn = prev.peerAuthn
		pc.build.reused(indexPeerAuthentication)
	}

	// Endpoints carry the auto mTLS that workload policies allow them, so
	// a change of policies with selectors re-derives them.
	peerAuthnChanged := plan.peerAuthn && (prev.peerAuthn.anySelected() || pc.peerAuthn.anySelected())
	switch {
	case plan.full:
		pc.endpoints = buildEndpointIndex(store, pc.services, pc.resolution, nil, nil, pc.versions, &pc.build, opts.TrustDomain, pc.peerAuthn)
		pc.build.rebuilt(indexEndpoints)
	case !resolutionChanged && len(plan.endpoints) == 0 && !peerAuthnChanged:
		pc.endpoints = prev.endpoints
		pc.build.reused(indexEndpoints)
	default:
		pc.endpoints = buildEndpointIndex(store, pc.services, pc.resolution, prev, plan.endpoints, pc.versions, &pc.build, opts.TrustDomain, pc.peerAuthn)
		pc.build.rebuilt(indexEndpoints)
	}

	if plan.full || plan.ingress || (plan.services && prev.ingress.readsAnyService(changedServices(plan, prev, pc, req), prev.services, pc.services)) {
		var cached *ingressIndex
		if prev != nil && prev.opts.equal(opts) {
			cached = prev.ingress
		}
		checks := ingressChecks{services: plan.full || plan.services, secrets: plan.full || plan.secrets}
		pc.ingress = buildIngressIndex(store, opts.Ingress, pc.services, cached, checks, &pc.build)
		pc.build.rebuilt(indexIngress)
	} else {
		pc.ingress = prev.ingress
		pc.build.reused(indexIngress)
	}
	if plan.full || plan.rules || plan.secrets {
		pc.credentials = buildCredentialIndex(store, store.Configs(model.KindDestinationRule))
		pc.build.rebuilt(indexCredentials)
	} else {
		pc.credentials = prev.credentials
		pc.build.reused(indexCredentials)
	}
	if plan.full || plan.virtualServices {
		pc.virtualServices = buildVirtualServiceIndex(store.Configs(model.KindVirtualService), opts.DomainSuffix)
		pc.build.rebuilt(indexVirtualServices)
	} else {
		pc.virtualServices = prev.virtualServices
		pc.build.reused(indexVirtualServices)
	}
	if plan.full || plan.workloads || plan.services || plan.namespaces {
		if workloads == nil {
			workloads = store.Workloads()
		}
		pc.addresses = buildAddressIndex(workloads, pc.services.all, store.Namespaces(), opts.ClusterID, opts.SystemNamespace)
		pc.build.rebuilt(indexAddresses)
	} else {
		pc.addresses = prev.addresses
		pc.build.reused(indexAddresses)
	}
	pc.sourceProblems = store.SourceProblems()
	pc.buildDuration = time.Since(pc.buildTime)
	return pc
}

// changedServices lists the services a build that re-read the Services
// finds changed: those req names, and those it does not name yet
// (UnannouncedServices). An index derived from the services must follow
// both, or it disagrees with the snapshot's own services until a later
// build, and the push of that later build, comparing two snapshots
// without the change, tells nobody.
func changedServices(plan buildPlan, prev, pc *PushContext, req *model.PushRequest) []model.NamespacedName {
	names := slices.Clip(plan.serviceKeys)
	for _, svc := range pc.UnannouncedServices(prev, req) {
		names = append(names, model.NamespacedName{Namespace: svc.Namespace, Name: svc.Name})
	}
	return names
}

// buildPlan says which indexes a Build must recompute.
type buildPlan struct {
	full      bool
	services  bool
	rules     bool
	workloads bool
	// serviceKeys lists the changed services.
	serviceKeys []model.NamespacedName
	// ingress is set by changes to Ingresses, IngressClasses or Secrets;
	// secrets by Secret changes alone.
	ingress, secrets bool
	peerAuthn        bool
	virtualServices  bool
	// namespaces is set by Namespace changes (their ambient labels, and
	// the network label of the system namespace).
	namespaces bool
	// endpoints lists the services whose endpoints must be re-read from the
	// store even if their entries could otherwise be reused.
	endpoints map[model.NamespacedName]struct{}
}

func planBuild(opts Options, prev *PushContext, req *model.PushRequest) buildPlan {
	if prev == nil || req == nil || len(req.ConfigsUpdated) == 0 || !prev.opts.equal(opts) {
		return buildPlan{full: true}
	}
	var plan buildPlan
	for key := range req.ConfigsUpdated {
		switch key.Kind {
		case model.KindService:
			plan.services = true
			plan.serviceKeys = append(plan.serviceKeys, model.NamespacedName{Namespace: key.Namespace, Name: key.Name})
		case model.KindIngress, model.KindIngressClass:
			plan.ingress = true
		case model.KindSecret:
			plan.ingress, plan.secrets = true, true
		case model.KindDestinationRule:
			plan.rules = true
		case model.KindEndpoints:
			if plan.endpoints == nil {
				plan.endpoints = map[model.NamespacedName]struct{}{}
			}
			plan.endpoints[model.NamespacedName{Namespace: key.Namespace, Name: key.Name}] = struct{}{}
		case model.KindWorkload:
			plan.workloads = true
		case model.KindPeerAuthentication:
			plan.peerAuthn = true
		case model.KindVirtualService:
			plan.virtualServices = true
		case model.KindNamespace:
			plan.namespaces = true
		case model.KindSourceProblems:
			// No index: every build reads them.
		default:
			// A kind this package does not know may feed anything.
			return buildPlan{full: true}
		}
	}
	return plan
}
