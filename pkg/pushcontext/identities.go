package pushcontext

import (
	"slices"
	"strings"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// WorkloadIdentities is the set of SPIFFE identities of the workloads behind
// a service: what a client checks the server's certificate against under
// ISTIO_MUTUAL. It is a comparable value, so generators can key caches by it.
type WorkloadIdentities struct {
	// joined holds the sorted identities, separated by newlines (which no
	// identity contains).
	joined string
}

// NewWorkloadIdentities makes a set of the given identities.
func NewWorkloadIdentities(ids ...string) WorkloadIdentities {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return WorkloadIdentities{joined: strings.Join(slices.Compact(ids), "\n")}
}

// List returns the identities, sorted; nil when there are none.
func (w WorkloadIdentities) List() []string {
	if w.joined == "" {
		return nil
	}
	return strings.Split(w.joined, "\n")
}

// Empty reports whether no workload identity is known.
func (w WorkloadIdentities) Empty() bool { return w.joined == "" }

func spiffeID(trustDomain, namespace, serviceAccount string) string {
	return "spiffe://" + trustDomain + "/ns/" + namespace + "/sa/" + serviceAccount
}

// identitiesOf collects the identities of eps. Endpoints without a
// service account (not backed by a Pod) have none.
func identitiesOf(eps []*model.Endpoint, trustDomain string) WorkloadIdentities {
	var first *model.Endpoint
	mixed := false
	for _, ep := range eps {
		if ep.ServiceAccount == "" {
			continue
		}
		if first == nil {
			first = ep
		} else if ep.ServiceAccount != first.ServiceAccount || ep.Namespace != first.Namespace {
			mixed = true
			break
		}
	}
	switch {
	case first == nil:
		return WorkloadIdentities{}
	case !mixed:
		// The common case, one Deployment behind the service: one string.
		return WorkloadIdentities{joined: spiffeID(trustDomain, first.Namespace, first.ServiceAccount)}
	}
	var ids []string
	for _, ep := range eps {
		if ep.ServiceAccount == "" {
			continue
		}
		id := spiffeID(trustDomain, ep.Namespace, ep.ServiceAccount)
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return WorkloadIdentities{joined: strings.Join(ids, "\n")}
}

// ServiceIdentities returns the identities of the workloads behind service
// hostname, as of the latest endpoint update.
func (pc *PushContext) ServiceIdentities(hostname string) WorkloadIdentities {
	ord, ok := pc.services.byHost[hostname]
	if !ok {
		return WorkloadIdentities{}
	}
	return pc.endpoints.slots[ord].entry.Load().identities
}
