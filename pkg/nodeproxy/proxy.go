package nodeproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	"github.com/meshpilot/meshpilot/pkg/caclient"
	"github.com/meshpilot/meshpilot/pkg/capture"
	"github.com/meshpilot/meshpilot/pkg/cni/agentapi"
	"github.com/meshpilot/meshpilot/pkg/hbone"
	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// The node proxy's ports, as ztunnel's: HBONE in, and the capture of the
// workloads' outbound connections.
const (
	HBONEPort    = 15008
	OutboundPort = 15001
	// InboundPlaintextPort takes connections that reach a workload
	// without HBONE (from outside the mesh), captured in its namespace.
	InboundPlaintextPort = 15006
)

// SocketMark marks every socket the node proxy opens in a workload's
// network namespace (Istio's 0x539), so that the capture rules let them
// out instead of redirecting them back to the proxy.
const SocketMark = 0x539

// Options configure a Proxy.
type Options struct {
	// Node is the node's name, as the Pods' spec.nodeName says.
	Node string
	// Conn reaches the control plane on 15012 (TLS trusting the mesh
	// root, the node proxy's ServiceAccount token on every call): both
	// WDS and the CA.
	Conn grpc.ClientConnInterface
	// IP, PodName and Namespace name the node proxy in its xDS node ID;
	// Domain is the cluster domain (cluster.local).
	IP, PodName, Namespace, Domain string
	// PodNetns returns the path of a workload's network namespace
	// (/var/run/netns/..., /proc/<pid>/ns/net). The CNI plugin's agent
	// answers it on a real node; tests name their namespaces.
	PodNetns func(namespace, name string) (string, error)
	// CertTTL is the workload certificate lifetime asked for; 0 leaves it
	// to the CA.
	CertTTL time.Duration
	// Kube and CNISocket enable the node agent (agent.go): the CNI plugin
	// asks it, over the Unix socket, to capture each new ambient pod, and
	// it reads and annotates Pods with Kube. A nil Kube or an empty
	// CNISocket leaves the agent off: the capture is then someone else's.
	Kube      kubernetes.Interface
	CNISocket string
	// ExcludeNamespaces are never captured, as the CNI plugin's
	// --exclude-namespaces: a running pod there that is labelled into the
	// mesh is left alone too.
	ExcludeNamespaces []string
	// TrustDomain is the mesh's, for the identity of a pod captured before
	// WDS tells of it; cluster.local by default.
	TrustDomain string
	// Capture is how the agent redirects a pod's traffic; nftables when
	// nil.
	Capture capture.Backend
	Metrics *Metrics
	Log     *slog.Logger
}

// Proxy is a running node proxy.
type Proxy struct {
	opts  Options
	log   *slog.Logger
	dir   *Directory
	certs *certStore
	wds   *wdsClient
	m     *Metrics

	// reconcileMu makes reconciles (from WDS changes and from the agent)
	// run one at a time, each from a fresh view, so that a late one never
	// undoes a newer one.
	reconcileMu sync.Mutex
	agent       agentState

	mu     sync.Mutex
	local  map[string]*localWorkload // by podKey
	closed bool
}

// New checks opts and returns a proxy; Run starts it.
func New(opts Options) (*Proxy, error) {
	switch {
	case opts.Node == "":
		return nil, errors.New("nodeproxy: Options.Node is required")
	case opts.Conn == nil:
		return nil, errors.New("nodeproxy: Options.Conn is required")
	case opts.PodNetns == nil:
		return nil, errors.New("nodeproxy: Options.PodNetns is required")
	}
	if opts.Domain == "" {
		opts.Domain = "cluster.local"
	}
	if opts.TrustDomain == "" {
		opts.TrustDomain = "cluster.local"
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	p := &Proxy{
		opts:  opts,
		log:   opts.Log,
		dir:   NewDirectory(),
		m:     opts.Metrics,
		local: map[string]*localWorkload{},
		agent: newAgentState(),
	}
	p.certs = newCertStore(caclient.New(caclient.Options{Conn: opts.Conn, TTL: opts.CertTTL}), opts.Log)
	p.certs.onChange = p.m.certsChanged
	p.wds = &wdsClient{
		conn: opts.Conn, dir: p.dir, log: opts.Log.With("stream", "wds"), synced: make(chan struct{}),
		node:       xdsNode(opts.IP, opts.PodName, opts.Namespace, opts.Domain),
		onResponse: p.m.wdsResponse,
	}
	return p, nil
}

// Synced is closed once the first WDS response has been applied.
func (p *Proxy) Synced() <-chan struct{} { return p.wds.synced }

// Run serves until ctx ends, then drains for up to drain and returns.
func (p *Proxy) Run(ctx context.Context, drain time.Duration) error {
	var wg sync.WaitGroup
	if p.agentEnabled() {
		// Pods captured before a restart are served again before the
		// socket takes new ones, so their traffic finds listeners at once.
		p.rediscover(ctx)
		l, err := agentapi.Listen(p.opts.CNISocket)
		if err != nil {
			return errorf("node agent socket %s: %w", p.opts.CNISocket, err)
		}
		p.log.Info("node agent listening", "socket", p.opts.CNISocket)
		wg.Add(2)
		go func() { defer wg.Done(); _ = agentapi.Serve(l, p) }()
		go func() {
			defer wg.Done()
			if err := p.watchMembership(ctx); err != nil {
				p.log.Error("node agent: running pods do not follow ambient labels", "err", err)
			}
		}()
		// Closing the socket first means no ADD starts serving a pod
		// while the proxy shuts down.
		defer wg.Wait()
		stop := context.AfterFunc(ctx, func() { l.Close() })
		defer stop()
	}
	wg.Add(2)
	go func() { defer wg.Done(); p.wds.run(ctx) }()
	go func() { defer wg.Done(); p.certLoop(ctx) }()
	for {
		changed := p.dir.Changed()
		p.reconcile()
		select {
		case <-ctx.Done():
			p.shutdown(drain)
			wg.Wait()
			return nil
		case <-changed:
		}
	}
}

// certLoop keeps the workloads' certificates: when a workload arrives on
// the node and whenever a renewal is due.
func (p *Proxy) certLoop(ctx context.Context) {
	for {
		next := p.certs.sync(ctx)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-p.certs.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// reconcile brings the listeners in step with the local ambient workloads
// (WDS's HBONE ones and the agent's captured pods): a workload that
// arrived gets its listeners; one that left loses them, with its tunnels.
// It returns why each workload it could not serve was not, by podKey.
func (p *Proxy) reconcile() map[string]error {
	p.reconcileMu.Lock()
	defer p.reconcileMu.Unlock()
	wanted := p.desired()
	ids := make([]string, 0, len(wanted))
	for _, s := range wanted {
		ids = append(ids, identity(s.w))
	}
	p.certs.want(ids)

	p.mu.Lock()
	defer p.mu.Unlock()
	failed := map[string]error{}
	if p.closed {
		for key := range wanted {
			failed[key] = errorf("the node proxy is shutting down")
		}
		return failed
	}
	for key, lw := range p.local {
		// An empty netns is WDS's path, resolved by PodNetns when started.
		if s, ok := wanted[key]; ok && sameAddresses(s.w, lw.w()) && (s.netns == "" || s.netns == lw.netns) {
			lw.current.Store(s.w)
			continue
		}
		p.log.Info("workload left the node proxy", "workload", lw.name())
		lw.close()
		delete(p.local, key)
	}
	for key, s := range wanted {
		if _, ok := p.local[key]; ok {
			continue
		}
		lw, err := p.startWorkload(s.w, s.netns)
		if err != nil {
			// Retried at the next change; its traffic stays where the
			// capture sends it (refused) until then.
			p.log.Error("workload not served", "workload", key, "err", err)
			p.m.workloadErrors.Inc()
			failed[key] = err
			continue
		}
		p.local[key] = lw
	}
	p.m.localWorkloads.Set(float64(len(p.local)))
	return failed
}

// served is one workload the proxy should serve, and the namespace the
// agent captured it in ("" when only WDS knows it).
type served struct {
	w     *workloadapi.Workload
	netns string
}

// podKey names a local workload by its Pod, "<namespace>/<name>": the same
// before WDS knows it (the agent's record) and after, so the listeners
// opened at CNI ADD are kept when WDS's workload replaces the record.
func podKey(w *workloadapi.Workload) string { return w.GetNamespace() + "/" + w.GetName() }

func sameAddresses(a, b *workloadapi.Workload) bool {
	x, y := workloadIPs(a), workloadIPs(b)
	// The CNI result and WDS may list a dual-stack pod's IPs in another order.
	slices.SortFunc(x, netip.Addr.Compare)
	slices.SortFunc(y, netip.Addr.Compare)
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

func (p *Proxy) shutdown(drain time.Duration) {
	p.mu.Lock()
	p.closed = true
	local := p.local
	p.local = map[string]*localWorkload{}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	var wg sync.WaitGroup
	for _, lw := range local {
		wg.Add(1)
		go func() { defer wg.Done(); lw.drain(ctx) }()
	}
	wg.Wait()
}

// hboneMetrics is what the HBONE library counts into.
func (p *Proxy) hboneMetrics() hbone.Metrics { return p.m }

func errorf(format string, args ...any) error { return fmt.Errorf("nodeproxy: "+format, args...) }
