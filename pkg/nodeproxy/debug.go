package nodeproxy

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"sort"
)

// DebugHandler serves the node proxy's state as JSON:
//   - /debug/certs: the identities it holds certificates for, with expiry
//     (never a key);
//   - /debug/workloads: the local workloads it serves, and how many
//     workloads and services WDS told it about;
//   - /debug/tunnels: the inbound tunnels open now.
//
// It answers only requests from the proxy's own pod (kubectl port-forward
// arrives there on loopback), as ztunnel serves its admin port on
// localhost alone: the port also serves /metrics to Prometheus, so any pod
// can reach it, and these pages say which workloads run here, who they
// talk to, and when their certificates expire.
func (p *Proxy) DebugHandler() http.Handler {
	return loopbackOnly(p.debugMux())
}

// loopbackOnly refuses every request that does not come from loopback.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.Unmap().IsLoopback() {
			http.Error(w, "the node proxy's debug pages answer only from its own pod: use kubectl port-forward", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (p *Proxy) debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/certs", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, p.certs.held())
	})
	mux.HandleFunc("GET /debug/workloads", func(w http.ResponseWriter, _ *http.Request) {
		type local struct {
			Name     string   `json:"name"`
			Identity string   `json:"identity"`
			IPs      []string `json:"ips"`
			Netns    string   `json:"netns"`
		}
		var out struct {
			Local     []local `json:"local"`
			Workloads int     `json:"workloadsKnown"`
			Services  int     `json:"servicesKnown"`
		}
		out.Workloads, out.Services = p.dir.Size()
		p.mu.Lock()
		for _, lw := range p.local {
			var ips []string
			for _, ip := range workloadIPs(lw.w()) {
				ips = append(ips, ip.String())
			}
			out.Local = append(out.Local, local{Name: lw.name(), Identity: identity(lw.w()), IPs: ips, Netns: lw.netns})
		}
		p.mu.Unlock()
		sort.Slice(out.Local, func(i, j int) bool { return out.Local[i].Name < out.Local[j].Name })
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /debug/tunnels", func(w http.ResponseWriter, _ *http.Request) {
		type tunnel struct {
			Workload string `json:"workload"`
			Peer     string `json:"peer"`
			From     string `json:"from"`
			Dest     string `json:"dest"`
		}
		var out []tunnel
		p.mu.Lock()
		for _, lw := range p.local {
			for _, s := range lw.inbound.OpenStreams() {
				out = append(out, tunnel{Workload: lw.name(), Peer: s.Peer, From: s.Remote.String(), Dest: s.Dest.String()})
			}
		}
		p.mu.Unlock()
		writeJSON(w, out)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
