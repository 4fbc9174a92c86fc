package pushcontext

import (
	"cmp"
	"slices"
	"time"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// Index names, as reported in BuildInfo.
const (
	indexServices           = "services"
	indexDestinationRules   = "destinationRules"
	indexResolution         = "destinationRuleResolution"
	indexEndpoints          = "endpoints"
	indexWorkloads          = "workloads"
	indexServiceTargets     = "serviceTargets"
	indexIngress            = "ingress"
	indexCredentials        = "credentials"
	indexPeerAuthentication = "peerAuthentication"
	indexVirtualServices    = "virtualServices"
	indexAddresses          = "addresses"
)

// BuildInfo records what the Build that made a snapshot recomputed.
type BuildInfo struct {
	// Full is set when nothing could be reused from a previous snapshot.
	Full    bool     `json:"full"`
	Rebuilt []string `json:"rebuilt"`
	Reused  []string `json:"reused"`
	// EndpointEntriesRead counts services whose endpoints were read from the
	// store, EndpointEntriesResubset those whose subset lists (or auto mTLS)
	// were recomputed from the previous entry, EndpointEntriesReused those
	// taken as they were.
	EndpointEntriesRead     int `json:"endpointEntriesRead"`
	EndpointEntriesResubset int `json:"endpointEntriesResubset"`
	EndpointEntriesReused   int `json:"endpointEntriesReused"`
	// IngressesTranslated counts owned Ingresses translated by this build,
	// IngressesReused those whose translation was taken from the previous
	// snapshot. Both stay 0 when the ingress index was reused whole.
	IngressesTranslated int `json:"ingressesTranslated"`
	IngressesReused     int `json:"ingressesReused"`
}

func (b *BuildInfo) rebuilt(index string) { b.Rebuilt = append(b.Rebuilt, index) }
func (b *BuildInfo) reused(index string)  { b.Reused = append(b.Reused, index) }

// BuildInfo returns what the Build of this snapshot rebuilt and reused.
func (pc *PushContext) BuildInfo() BuildInfo {
	info := pc.build
	info.Rebuilt = slices.Clone(info.Rebuilt)
	info.Reused = slices.Clone(info.Reused)
	return info
}

// Problem is something wrong with one object, found while indexing. The
// object was skipped or partly ignored; everything else was indexed.
type Problem struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Message   string `json:"message"`
}

// Summary is the body of /debug/pushcontext.
type Summary struct {
	Version          string            `json:"version"`
	BuildTime        time.Time         `json:"buildTime"`
	BuildDuration    string            `json:"buildDuration"`
	Build            BuildInfo         `json:"build"`
	Counts           SummaryCounts     `json:"counts"`
	Visibility       VisibilitySummary `json:"visibility"`
	DestinationRules []RuleSummary     `json:"destinationRules"`
	// VirtualServices are those bound to the mesh, oldest first: for a
	// host, the first one a proxy's namespace sees wins.
	VirtualServices []VirtualServiceSummary `json:"virtualServices"`
	Ingress         IngressSummary          `json:"ingress"`
	// Problems include what was dropped from each owned Ingress (the same
	// reasons IngressProblems gives).
	Problems []Problem `json:"problems"`
	// TranslationProblems are what generators reported, through
	// ReportProblem, that they had to drop while translating this snapshot.
	TranslationProblems []Problem `json:"translationProblems"`
	// SourceProblems are what the sources could not read when the snapshot
	// was built: config files that do not parse (their last good objects
	// are served) and the objects of files that were rejected.
	SourceProblems []model.SourceProblem `json:"sourceProblems"`
}

// SummaryCounts sizes the snapshot.
type SummaryCounts struct {
	Services  int `json:"services"`
	Endpoints int `json:"endpoints"`
	// DestinationRules counts the rules indexed; MergedDestinationRules the
	// per-namespace, per-host entries they were merged into.
	DestinationRules       int `json:"destinationRules"`
	MergedDestinationRules int `json:"mergedDestinationRules"`
}

// IngressSummary sizes the ingress index. The gateway fields are zero when
// there is no gateway configuration (no gateway Service, or no owned
// Ingress).
type IngressSummary struct {
	Owned        int    `json:"owned"`
	Ignored      int    `json:"ignored"`
	WithProblems int    `json:"withProblems"`
	HTTPPort     uint32 `json:"httpPort"`
	HTTPSPort    uint32 `json:"httpsPort"`
	VirtualHosts int    `json:"virtualHosts"`
	Routes       int    `json:"routes"`
	TLSHosts     int    `json:"tlsHosts"`
	Secrets      int    `json:"secrets"`
}

// VisibilitySummary says which namespaces see more than the public services.
type VisibilitySummary struct {
	PublicServices int `json:"publicServices"`
	// Namespaces lists, sorted by name, the namespaces that non-public
	// services are exported to; every other namespace sees the public ones.
	Namespaces []NamespaceVisibility `json:"namespaces"`
	// HiddenServices are exported to no namespace at all.
	HiddenServices []string `json:"hiddenServices"`
}

// NamespaceVisibility is what one namespace sees beyond the public services.
type NamespaceVisibility struct {
	Namespace          string   `json:"namespace"`
	VisibleServices    int      `json:"visibleServices"`
	RestrictedServices []string `json:"restrictedServices"`
}

// RuleSummary is one merged destination rule entry.
type RuleSummary struct {
	Namespace string   `json:"namespace"`
	Host      string   `json:"host"`
	ExportTo  []string `json:"exportTo"`
	From      []string `json:"from"`
	Subsets   []string `json:"subsets"`
	// WorkloadSelector is set on rules that apply only to the proxies of
	// their namespace that it selects.
	WorkloadSelector map[string]string `json:"workloadSelector,omitempty"`
}

// Summary describes the snapshot for debugging. Everything is sorted, so the
// same store gives the same summary.
func (pc *PushContext) Summary() Summary {
	s := Summary{
		Version:       pc.version,
		BuildTime:     pc.buildTime,
		BuildDuration: pc.buildDuration.String(),
		Build:         pc.BuildInfo(),
		Counts: SummaryCounts{
			Services:               len(pc.services.all),
			DestinationRules:       pc.rules.configs,
			MergedDestinationRules: len(pc.rules.entries),
		},
		Visibility:          pc.visibilitySummary(),
		VirtualServices:     pc.virtualServices.summary(),
		Ingress:             pc.ingress.summary(),
		Problems:            pc.problems(),
		TranslationProblems: pc.translationProblems(),
		SourceProblems:      pc.sourceProblems,
	}
	if s.SourceProblems == nil {
		s.SourceProblems = []model.SourceProblem{}
	}
	for i := range pc.endpoints.slots {
		s.Counts.Endpoints += len(pc.endpoints.slots[i].entry.Load().all)
	}
	s.DestinationRules = make([]RuleSummary, 0, len(pc.rules.entries))
	for _, e := range pc.rules.entries {
		rs := RuleSummary{Namespace: e.namespace, Host: e.host, ExportTo: slices.Clone(e.exportTo)}
		if e.selector != nil {
			rs.WorkloadSelector = e.selector.labels
		}
		for _, from := range e.rule.From {
			rs.From = append(rs.From, from.String())
		}
		for _, sub := range e.rule.Spec.Subsets {
			rs.Subsets = append(rs.Subsets, sub.GetName())
		}
		s.DestinationRules = append(s.DestinationRules, rs)
	}
	// Stable: entries for one host keep their creation order, which is the
	// order lookups try them in.
	slices.SortStableFunc(s.DestinationRules, func(a, b RuleSummary) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Host, b.Host))
	})
	return s
}

func (pc *PushContext) visibilitySummary() VisibilitySummary {
	v := VisibilitySummary{PublicServices: len(pc.services.public)}
	for ns, list := range pc.services.restricted {
		nv := NamespaceVisibility{Namespace: ns, VisibleServices: len(list)}
		for _, svc := range list {
			if !svc.ExportTo.Public() {
				nv.RestrictedServices = append(nv.RestrictedServices, svc.Hostname)
			}
		}
		v.Namespaces = append(v.Namespaces, nv)
	}
	slices.SortFunc(v.Namespaces, func(a, b NamespaceVisibility) int { return cmp.Compare(a.Namespace, b.Namespace) })
	for _, svc := range pc.services.all {
		if svc.ExportTo.Public() {
			continue
		}
		hidden := true
		for _, ns := range svc.ExportTo {
			if exportedNamespace(ns, svc.Namespace) != "" {
				hidden = false
				break
			}
		}
		if hidden {
			v.HiddenServices = append(v.HiddenServices, svc.Hostname)
		}
	}
	return v
}

func (pc *PushContext) problems() []Problem {
	out := make([]Problem, 0, len(pc.services.problems)+len(pc.rules.problems))
	out = append(out, pc.services.problems...)
	out = append(out, pc.rules.problems...)
	out = append(out, pc.virtualServices.problems...)
	for name, reasons := range pc.ingress.problems {
		for _, r := range reasons {
			out = append(out, Problem{Kind: model.KindIngress.String(), Namespace: name.Namespace, Name: name.Name, Message: r})
		}
	}
	return sortProblems(out)
}

func sortProblems(out []Problem) []Problem {
	slices.SortFunc(out, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.Message, b.Message))
	})
	return slices.Compact(out)
}
