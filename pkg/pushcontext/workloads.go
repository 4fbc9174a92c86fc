package pushcontext

import (
	"strings"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// workloadIndex finds workloads (Pods) by IP. It depends on workloads only.
type workloadIndex struct {
	// byIP lists the workloads that use each IP, ordered by namespace and
	// name. Host-network Pods share their node's IP, so there may be many.
	byIP  map[string][]*model.Workload
	count int
}

func buildWorkloadIndex(workloads []*model.Workload) *workloadIndex {
	idx := &workloadIndex{byIP: make(map[string][]*model.Workload, len(workloads)), count: len(workloads)}
	for _, w := range workloads {
		if w == nil {
			continue
		}
		for _, ip := range w.IPs {
			list := idx.byIP[ip]
			// A Pod that lists one IP twice is indexed once; its entries
			// are adjacent because workloads arrive one at a time.
			if n := len(list); n > 0 && list[n-1] == w {
				continue
			}
			idx.byIP[ip] = append(list, w)
		}
	}
	return idx
}

// targetIndex answers which services select a workload. It depends on
// services and workloads: the per-namespace lists come from the services,
// and the cache holds only workloads of the snapshots that share it.
type targetIndex struct {
	// selecting holds, per namespace, the services with a non-empty
	// selector, sorted by hostname.
	selecting map[string][]*model.Service
	// cache maps *model.Workload to its services. Only workloads that a
	// proxy asks about are ever computed, so Build does no per-Pod work.
	cache sync.Map
}

func buildTargetIndex(services *serviceIndex) *targetIndex {
	idx := &targetIndex{}
	for _, svc := range services.all {
		if len(svc.Selector) == 0 {
			continue
		}
		if idx.selecting == nil {
			idx.selecting = map[string][]*model.Service{}
		}
		idx.selecting[svc.Namespace] = append(idx.selecting[svc.Namespace], svc)
	}
	return idx
}

func (idx *targetIndex) targets(w *model.Workload) []*model.Service {
	if cached, ok := idx.cache.Load(w); ok {
		return cached.([]*model.Service)
	}
	var out []*model.Service
	for _, svc := range idx.selecting[w.Namespace] {
		if selects(svc.Selector, w.Labels) {
			out = append(out, svc)
		}
	}
	cached, _ := idx.cache.LoadOrStore(w, out)
	return cached.([]*model.Service)
}

// selects reports whether labels carries every label of selector.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// WorkloadByIP returns the workload (Pod) with that IP, nil if none. When
// several Pods share the IP (host networking), it returns the first by
// namespace and name.
func (pc *PushContext) WorkloadByIP(ip string) *model.Workload {
	if list := pc.workloads.byIP[ip]; len(list) > 0 {
		return list[0]
	}
	return nil
}

// ServiceTargets returns the services in w's namespace whose non-empty
// selector matches w's labels, sorted by hostname; nil for none or a nil w.
// The result is computed once per workload and snapshot chain, and shared:
// never mutate it.
func (pc *PushContext) ServiceTargets(w *model.Workload) []*model.Service {
	if w == nil {
		return nil
	}
	return pc.targets.targets(w)
}

// WorkloadForProxy returns the workload of the first of the proxy's IPs that
// belongs to a known Pod in the proxy's namespace (any namespace when the
// proxy's is empty), nil if none. When several such Pods share the IP (host
// networking), the one named by the proxy's node ID (type~ip~pod.ns~domain)
// wins, else the first by name.
func (pc *PushContext) WorkloadForProxy(p *model.Proxy) *model.Workload {
	if p == nil {
		return nil
	}
	podName := podNameInID(p.ID)
	for _, ip := range p.IPAddresses {
		var first *model.Workload
		for _, w := range pc.workloads.byIP[ip] {
			if p.Namespace != "" && w.Namespace != p.Namespace {
				continue
			}
			if isPod(podName, w) {
				return w
			}
			if first == nil {
				first = w
			}
		}
		if first != nil {
			return first
		}
	}
	return nil
}

// isPod reports whether podName ("name.namespace") names w.
func isPod(podName string, w *model.Workload) bool {
	return len(podName) == len(w.Name)+1+len(w.Namespace) && podName[len(w.Name)] == '.' &&
		strings.HasPrefix(podName, w.Name) && strings.HasSuffix(podName, w.Namespace)
}

// podNameInID returns the "pod.namespace" field of a node ID, or "".
func podNameInID(id string) string {
	_, rest, ok := strings.Cut(id, "~")
	if !ok {
		return ""
	}
	if _, rest, ok = strings.Cut(rest, "~"); !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "~")
	return name
}
