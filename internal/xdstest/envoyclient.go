package xdstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// Mode is the ADS protocol variant the client speaks.
type Mode int

const (
	// SotW is state-of-the-world ADS (StreamAggregatedResources).
	SotW Mode = iota
	// Delta is incremental ADS (DeltaAggregatedResources).
	Delta
)

func (m Mode) String() string {
	if m == Delta {
		return "delta"
	}
	return "sotw"
}

// EnvoyClient is an ADS client that behaves as Envoy's xDS client does, so
// that tests see what a real Envoy would end up serving:
//
//   - It subscribes as Envoy does: CDS (wildcard) first; EDS for every EDS
//     cluster fetched over ADS (by service_name, else the cluster name); LDS
//     (wildcard) only once the initial clusters have warmed, because "once
//     cluster manager initialization is done, RDS and LDS initialize"
//     (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/operations/init);
//     RDS for every route_config_name an HCM fetches over ADS; SDS for every
//     secret a transport socket fetches over ADS.
//   - It accepts or rejects each response as a whole: any resource that does
//     not unpack, fails ValidateDeep, has the wrong type, or repeats a name
//     makes it NACK the response and keep its previous state.
//   - A new or changed cluster (listener) warms while the previous version
//     keeps serving, until its dependencies arrive; the re-requests Envoy's
//     gRPC mux sends on the way are sent exactly as Envoy sends them (see
//     envoyclient_state.go), and logged by Requests.
//   - It can lose its stream and open another one on the same connection
//     (Disconnect, Reconnect), keeping what it serves meanwhile, and starts
//     the new stream as Envoy does (see envoyState.connect).
//
// All methods are safe for concurrent use. Returned protos are shared with
// the client and must not be modified.
type EnvoyClient struct {
	t      testing.TB
	mode   Mode
	closer func()
	ads    adsClient

	mu sync.Mutex
	st *envoyState
}

// NewEnvoyClient opens an ADS stream of the given mode on conn, identifies
// itself with node (on the first request of each stream only, as Envoy does
// with set_node_on_first_message_only) and starts following the
// configuration. The client closes itself when the test ends.
func NewEnvoyClient(t testing.TB, conn grpc.ClientConnInterface, node *corev3.Node, mode Mode) *EnvoyClient {
	t.Helper()
	c := &EnvoyClient{t: t, mode: mode}
	c.st = newEnvoyState(mode == Delta, &c.mu)
	open := func(ctx context.Context) (transport, error) { return openSotW(ctx, conn, node) }
	if mode == Delta {
		open = func(ctx context.Context) (transport, error) { return openDelta(ctx, conn, node) }
	}
	c.ads = adsClient{open: open, model: c.st, mu: &c.mu}
	t.Cleanup(c.Close)
	if err := c.ads.connect(); err != nil {
		t.Fatalf("envoy client: open %s stream: %v", mode, err)
	}
	return c
}

// DialEnvoyClient is NewEnvoyClient on a new plaintext connection to target
// (host:port), closed with the client.
func DialEnvoyClient(t testing.TB, target string, node *corev3.Node, mode Mode) *EnvoyClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("envoy client: dial %s: %v", target, err)
	}
	c := NewEnvoyClient(t, conn, node, mode)
	c.closer = func() { _ = conn.Close() }
	return c
}

// Disconnect closes the client's stream, as a broken connection to the
// management server does, and leaves it closed until Reconnect. The
// client keeps serving what it holds: "the last known configuration
// received by Envoy will persist until the connection is reestablished"
// ("TTL", https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol).
// Warming goes on, and an initial_fetch_timeout still expires: a broken
// stream is no failed update to Envoy's subscriptions, which only count it
// (GrpcSubscriptionImpl::onConfigUpdateFailed, ConnectionFailure,
// grpc_subscription_impl.cc). Requests due meanwhile are dropped, as the
// next stream starts with the whole subscription anyway
// (GrpcMuxImpl::queueDiscoveryRequest, grpc_mux_impl.cc).
func (c *EnvoyClient) Disconnect() { c.ads.disconnect() }

// Reconnect closes the client's stream, if it has one, and opens a new one
// on the same connection, as Envoy does when its ADS stream breaks. Nothing
// the client holds is dropped: the server's responses on the new stream
// replace or remove it, and what they change warms as usual. It also
// revives a stream that ended by itself (Err). A closed client stays closed.
func (c *EnvoyClient) Reconnect() {
	c.t.Helper()
	if err := c.ads.reconnect(); err != nil {
		c.t.Fatalf("envoy client: reopen %s stream: %v", c.mode, err)
	}
}

// Close ends the stream and stops all timers. It is idempotent.
func (c *EnvoyClient) Close() {
	c.ads.close(func() {
		c.mu.Lock()
		c.st.stopTimers()
		c.mu.Unlock()
		if c.closer != nil {
			c.closer()
		}
	})
}

// Snapshot is the configuration a client would be serving: for an Envoy,
// active (warm) resources only, keyed by name. Endpoints are keyed by cluster name and
// belong to the active version of that cluster.
type Snapshot struct {
	Clusters  map[string]*clusterv3.Cluster
	Endpoints map[string]*endpointv3.ClusterLoadAssignment
	Listeners map[string]*listenerv3.Listener
	Routes    map[string]*routev3.RouteConfiguration
	Secrets   map[string]*tlsv3.Secret
	// Workload is what a node proxy follows (istio.workload.Address,
	// istio.security.Authorization), by type URL and then name.
	Workload map[string]map[string]proto.Message
}

// Active returns a copy of the active configuration.
func (c *EnvoyClient) Active() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.snapshot()
}

// Cluster is the active version of a cluster, or nil.
func (c *EnvoyClient) Cluster(name string) *clusterv3.Cluster { return c.Active().Clusters[name] }

// Endpoints is the load assignment the active version of a cluster uses,
// or nil (not an EDS cluster, or its initial_fetch_timeout expired).
func (c *EnvoyClient) Endpoints(cluster string) *endpointv3.ClusterLoadAssignment {
	return c.Active().Endpoints[cluster]
}

// Listener is the active version of a listener, or nil.
func (c *EnvoyClient) Listener(name string) *listenerv3.Listener { return c.Active().Listeners[name] }

// Route is the RouteConfiguration received for a subscribed name, or nil.
func (c *EnvoyClient) Route(name string) *routev3.RouteConfiguration {
	return c.Active().Routes[name]
}

// Secret is the secret received for a subscribed name, or nil.
func (c *EnvoyClient) Secret(name string) *tlsv3.Secret { return c.Active().Secrets[name] }

// Warming is a cluster or listener that is not serving yet, or an initial
// CDS/LDS response not received yet.
type Warming struct {
	Type       string // "Cluster", "Listener", or "CDS"/"LDS" for initialization
	Name       string
	Since      time.Time
	WaitingFor []string // e.g. "ClusterLoadAssignment outbound|80||a.ns.svc.cluster.local"
}

func (w Warming) String() string {
	return fmt.Sprintf("%s %s warming for %v, waiting for %s", w.Type, w.Name,
		time.Since(w.Since).Round(time.Millisecond), strings.Join(w.WaitingFor, ", "))
}

// Warming lists what is warming now, oldest first.
func (c *EnvoyClient) Warming() []Warming {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.warming()
}

// Dangling lists references of the active configuration that resolve to
// nothing: a listener's route config or a secret never received, a route's
// or tcp_proxy's cluster that is not an active cluster, an active EDS
// cluster with no load assignment (its initial_fetch_timeout expired).
func (c *EnvoyClient) Dangling() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.dangling()
}

// Nack is a response the client rejected.
type Nack struct {
	TypeURL, Version, Nonce string // of the rejected response
	Error                   string // the error_detail message sent
}

// Nacks lists every NACK sent, in order.
func (c *EnvoyClient) Nacks() []Nack {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Nack(nil), c.st.nacks...)
}

// SentRequest is one request the client sent. For SotW, ResourceNames is the
// full set (nil for a wildcard); for delta, Subscribe and Unsubscribe are
// the increments, VersionInfo is empty, and the first request of a type on
// a stream carries InitialResourceVersions, what the client holds.
type SentRequest struct {
	At                      time.Time
	TypeURL                 string
	VersionInfo             string
	ResponseNonce           string
	ResourceNames           []string
	Subscribe, Unsubscribe  []string
	InitialResourceVersions map[string]string
	ErrorDetail             string
}

func (r SentRequest) String() string {
	s := fmt.Sprintf("%s %s version=%q nonce=%q", r.At.Format("15:04:05.000"), shortType(r.TypeURL), r.VersionInfo, r.ResponseNonce)
	if r.ResourceNames != nil {
		s += fmt.Sprintf(" names=%v", r.ResourceNames)
	}
	if r.Subscribe != nil || r.Unsubscribe != nil {
		s += fmt.Sprintf(" subscribe=%v unsubscribe=%v", r.Subscribe, r.Unsubscribe)
	}
	if len(r.InitialResourceVersions) > 0 {
		s += fmt.Sprintf(" initial_resource_versions=%v", r.InitialResourceVersions)
	}
	if r.ErrorDetail != "" {
		s += " error=" + r.ErrorDetail
	}
	return s
}

// Requests lists every request sent, in order.
func (c *EnvoyClient) Requests() []SentRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]SentRequest(nil), c.st.requests...)
}

// Err is the error that ended the stream by itself, or nil while it runs
// or after Disconnect.
func (c *EnvoyClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.err
}

// WaitWarm waits until the client is fully warm: the initial CDS and LDS
// responses processed, nothing warming and nothing dangling. After timeout
// it returns an error that lists what is still warming (and for how long)
// and what dangles.
func (c *EnvoyClient) WaitWarm(timeout time.Duration) error {
	return c.WaitFor(timeout, nil)
}

// WaitFor is WaitWarm that also waits until cond holds on the active
// configuration (cond may be nil).
func (c *EnvoyClient) WaitFor(timeout time.Duration, cond func(Snapshot) error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		err := c.st.settled(cond)
		changed, streamErr := c.st.changed, c.st.err
		c.mu.Unlock()
		if err == nil {
			return nil
		}
		if streamErr != nil {
			return fmt.Errorf("stream ended (%v) while %w", streamErr, err)
		}
		select {
		case <-changed:
		case <-deadline.C:
			c.mu.Lock()
			err = c.st.settled(cond) // now, so that warming times are current
			c.mu.Unlock()
			if err == nil {
				return nil
			}
			return fmt.Errorf("after %v: %w", timeout, err)
		}
	}
}

// RequireWarm fails the test unless the client is fully warm within timeout
// (see WaitFor), with cond holding (cond may be nil), and has sent no NACK.
func (c *EnvoyClient) RequireWarm(timeout time.Duration, cond func(Snapshot) error) {
	c.t.Helper()
	err := c.WaitFor(timeout, cond)
	var nacks []error
	for _, n := range c.Nacks() {
		nacks = append(nacks, fmt.Errorf("NACK of %s version %q nonce %q: %s", n.TypeURL, n.Version, n.Nonce, n.Error))
	}
	if err = errors.Join(append([]error{err}, nacks...)...); err != nil {
		c.t.Fatalf("envoy client (%s): %v", c.mode, err)
	}
}
