package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/bootstrap"
)

// The replica test's sizes: three replicas, as a small production install
// runs, and twenty clients each once they have spread out.
const (
	replicaCount   = 3
	replicaClients = 60
	// Each replica should end within this many clients of an even share.
	replicaSpread = 5
)

// TestReplicasSpreadClientsAndHandOverWrites runs three control planes on
// one API server behind a TCP balancer that stands in for the Service. All
// sixty clients first connect to the first replica, as after a rollout that
// brought it up before the others; the connection age then closes their
// connections, they reconnect through the balancer, now spreading, and end
// evenly over the replicas without ever holding less than the full config.
// Then the leader stops, and another replica takes over the writes only the
// leader makes: Ingress status, the validator's caBundle and
// istio-ca-root-cert.
func TestReplicasSpreadClientsAndHandOverWrites(t *testing.T) {
	m := newKubeMesh(t)
	m.apply(t, "world", replicasWorldYAML)
	m.setGatewayStatus(t, `{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.7"}]}}}`)

	const leaseDuration = 6 * time.Second
	replicas := make([]*controlPlane, replicaCount)
	addrs := make([]string, replicaCount)
	for i := range replicas {
		replicas[i] = startControlPlane(t, m, withIdentity(fmt.Sprintf("pilot-%d", i)), func(o *bootstrap.Options) {
			// Short enough that the test sees every client move twice or
			// more, long enough that a loaded machine still configures a
			// client within one connection's life.
			o.MaxConnectionAge, o.MaxConnectionAgeGrace = 3*time.Second, time.Second
			o.LeaderElection.LeaseDuration, o.LeaderElection.RenewDeadline, o.LeaderElection.RetryPeriod =
				leaseDuration, 4*time.Second, 500*time.Millisecond
		})
		addrs[i] = replicas[i].xdsAddr
	}
	lb := startBalancer(t, addrs)

	want := replicaWant{
		cluster:   "outbound|7070||echo.replicas.svc.cluster.local",
		endpoints: []string{"10.244.2.10", "10.244.2.11"},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	clients := make([]*replicaClient, replicaClients)
	for i := range clients {
		clients[i] = newReplicaClient(t, i, lb.addr(), want)
		wg.Go(func() { clients[i].run(ctx) })
	}

	t.Run("every client is configured by the first replica", func(t *testing.T) {
		waitFor(t, 60*time.Second, "every client configured", func() error {
			for _, c := range clients {
				if c.completeStreams() == 0 {
					return fmt.Errorf("client %d has no full config yet", c.id)
				}
			}
			return nil
		})
		// Clients whose connection aged meanwhile came back to the same
		// replica; wait until none is between two connections.
		waitFor(t, 30*time.Second, "all clients on replica 0", func() error {
			counts := clientCounts(t, replicas)
			if counts[0] != replicaClients || counts[1]+counts[2] != 0 {
				return fmt.Errorf("clients per replica %v, want all %d on replica 0", counts, replicaClients)
			}
			return nil
		})
	})

	t.Run("after the connection age the clients spread evenly", func(t *testing.T) {
		before := make([]int, len(clients))
		for i, c := range clients {
			before[i] = c.completeStreams()
		}
		lb.spread.Store(true)
		waitFor(t, 60*time.Second, "every client reconnected since the balancer spread", func() error {
			for i, c := range clients {
				if c.completeStreams() <= before[i] {
					return fmt.Errorf("client %d has not been configured on a new connection", c.id)
				}
			}
			return nil
		})
		waitFor(t, 30*time.Second, "an even share per replica", func() error {
			counts := clientCounts(t, replicas)
			return evenShare(counts, replicaClients, replicaSpread)
		})
		t.Logf("clients per replica after spreading: %v", clientCounts(t, replicas))
	})

	t.Run("no client lost config while it moved", func(t *testing.T) {
		for _, c := range clients {
			c.mu.Lock()
			if len(c.problems) > 0 {
				t.Errorf("client %d: %s", c.id, strings.Join(c.problems, "; "))
			}
			if c.identicalMoves == 0 {
				t.Errorf("client %d never compared its config across a reconnection", c.id)
			}
			c.mu.Unlock()
		}
	})

	t.Run("another replica takes over the leader's writes", func(t *testing.T) {
		// Two Leases: the shared one (Ingress status, istio-ca-root-cert)
		// and the revision's own (its webhooks' caBundle). Each has
		// exactly one holder, not necessarily the same replica.
		oneLeader := func(lease string) int {
			leader := -1
			waitFor(t, 2*leaseDuration, "exactly one holder of "+lease, func() error {
				var leaders []int
				for i, r := range replicas {
					if leads(t, r, lease) {
						leaders = append(leaders, i)
					}
				}
				if len(leaders) != 1 {
					return fmt.Errorf("leaders %v, want one", leaders)
				}
				leader = leaders[0]
				return nil
			})
			return leader
		}
		leader := oneLeader(bootstrap.DefaultOptions().LeaderElection.Name)
		bundleLeader := oneLeader("meshpilot-webhook-cabundle-default")
		waitFor(t, 30*time.Second, "the leader's Ingress status", func() error {
			return m.expectIngressStatus(t, "replicas", "web", "198.51.100.7")
		})
		root, _ := publishedRootTLS(t, m, "replicas")
		waitFor(t, 30*time.Second, "the validator's caBundle", func() error {
			return m.expectValidatorCABundle(replicasValidator, root)
		})
		// Only the revision's leader patched it; the others never tried.
		for i, r := range replicas {
			patches := metricWith(t, r, "meshpilot_webhook_cabundle_patches_total", nil)
			if i == bundleLeader && patches == 0 {
				t.Errorf("the leader, replica %d, counts no caBundle patch", i)
			}
			if i != bundleLeader && patches != 0 {
				t.Errorf("replica %d, not the leader, counts %v caBundle patches", i, patches)
			}
		}
		replicas[leader].stop(t)
		// A crash leaves the Lease to expire (pkg/controllers'
		// TestLeaderElectorTakesOverFromACrashedLeader); a stop, as here,
		// releases it at once. Either way the next leader is in place
		// within the lease duration, which is the deadline.
		waitFor(t, leaseDuration, "a new leader among the others", func() error {
			for i, r := range replicas {
				if i != leader && leads(t, r, bootstrap.DefaultOptions().LeaderElection.Name) {
					return nil
				}
			}
			return errNotYet
		})
		m.setGatewayStatus(t, `{"status":{"loadBalancer":{"ingress":[{"hostname":"lb.example.com"}]}}}`)
		waitFor(t, 30*time.Second, "Ingress status from the new leader", func() error {
			return m.expectIngressStatus(t, "replicas", "web", "lb.example.com")
		})
		other, _ := testcerts.SelfSigned(t, "not-the-mesh-root")
		m.run(t, "", "patch", "validatingwebhookconfiguration", replicasValidator, "--type=json", "-p",
			fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":%q}]`, base64.StdEncoding.EncodeToString(other)))
		waitFor(t, 30*time.Second, "the caBundle put back by the new leader", func() error {
			return m.expectValidatorCABundle(replicasValidator, root)
		})
		m.apply(t, "late", "apiVersion: v1\nkind: Namespace\nmetadata: {name: replicas-late}\n")
		waitFor(t, 30*time.Second, "istio-ca-root-cert from the new leader", func() error {
			_, err := m.kube.CoreV1().ConfigMaps("replicas-late").Get(t.Context(), "istio-ca-root-cert", metav1.GetOptions{})
			return err
		})
		// The stopped replica's clients came over without losing config.
		waitFor(t, 30*time.Second, "every client on a live replica", func() error {
			counts := clientCounts(t, replicas)
			if got := counts[0] + counts[1] + counts[2] - counts[leader]; got != replicaClients {
				return fmt.Errorf("clients per replica %v with replica %d stopped", counts, leader)
			}
			return nil
		})
		for _, c := range clients {
			c.mu.Lock()
			if len(c.problems) > 0 {
				t.Errorf("client %d: %s", c.id, strings.Join(c.problems, "; "))
			}
			c.mu.Unlock()
		}
	})
}

// evenShare checks that counts add up to total and each is within spread of
// an even share.
func evenShare(counts []int, total, spread int) error {
	sum := 0
	for _, n := range counts {
		sum += n
	}
	share := total / len(counts)
	if sum != total || slices.ContainsFunc(counts, func(n int) bool { return n < share-spread || n > share+spread }) {
		return fmt.Errorf("clients per replica %v, want %d each ± %d, %d in all", counts, share, spread, total)
	}
	return nil
}

// clientCounts reads each replica's meshpilot_xds_clients (its connected
// ADS streams); a stopped replica counts 0.
func clientCounts(t *testing.T, replicas []*controlPlane) []int {
	t.Helper()
	out := make([]int, len(replicas))
	for i, r := range replicas {
		out[i] = int(metricWith(t, r, "meshpilot_xds_clients", nil))
	}
	return out
}

// expectValidatorCABundle checks that every webhook of the
// ValidatingWebhookConfiguration name trusts exactly root.
func (m *kubeMesh) expectValidatorCABundle(name string, root []byte) error {
	c, err := m.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, w := range c.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, root) {
			return fmt.Errorf("%s/%s has caBundle %q, want the mesh root", name, w.Name, w.ClientConfig.CABundle)
		}
	}
	return nil
}

func leads(t *testing.T, r *controlPlane, lease string) bool {
	return metricWith(t, r, "meshpilot_leader", map[string]string{"lease": lease}) == 1
}

// balancer is a TCP proxy in front of the replicas, as a Service's virtual
// IP is: each new connection goes to one replica, first always the first
// one, then, once spread is set, to each in turn. A replica that refuses
// the connection is skipped, as kube-proxy stops sending to a pod that is
// gone.
type balancer struct {
	l        net.Listener
	backends []string
	spread   atomic.Bool
	next     atomic.Uint64
}

func startBalancer(t *testing.T, backends []string) *balancer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{l: l, backends: backends}
	var conns sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { b.proxy(c) })
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		conns.Wait()
	})
	return b
}

func (b *balancer) addr() string { return b.l.Addr().String() }

func (b *balancer) proxy(down net.Conn) {
	first := 0
	if b.spread.Load() {
		first = int(b.next.Add(1) % uint64(len(b.backends)))
	}
	var up net.Conn
	for i := range b.backends {
		c, err := net.DialTimeout("tcp", b.backends[(first+i)%len(b.backends)], time.Second)
		if err == nil {
			up = c
			break
		}
	}
	if up == nil {
		_ = down.Close()
		return
	}
	// Either side closing ends the connection, as a real one would.
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = down.Close()
			_ = up.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, down)
		closeBoth()
	})
	_, _ = io.Copy(down, up)
	closeBoth()
	wg.Wait()
}

// replicaWant is what every client must hold: a cluster and its endpoints.
type replicaWant struct {
	cluster   string
	endpoints []string
}

// replicaClient is a sidecar's ADS client (state of the world, CDS then
// EDS, every response ACKed) that does what Envoy does when its stream
// ends: it keeps the config it has, opens a new stream (grpc-go redials
// through the balancer, which may pick another replica), and swaps in the
// new stream's config only once it is complete. Every response is checked
// against want, and the first complete config of each new stream against
// the one the last stream left.
type replicaClient struct {
	id   int
	node *corev3.Node
	conn *grpc.ClientConn
	want replicaWant

	mu sync.Mutex
	// config is the last complete config: clusters and load assignments.
	config   map[string]proto.Message
	complete int
	// identicalMoves counts new streams whose config equalled the last.
	identicalMoves int
	problems       []string
}

func newReplicaClient(t *testing.T, id int, target string, want replicaWant) *replicaClient {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ip := fmt.Sprintf("10.244.9.%d", id+1)
	return &replicaClient{id: id, conn: conn, want: want,
		node: &corev3.Node{Id: nodeID(ip, fmt.Sprintf("client-%d", id), "replicas")}}
}

func (c *replicaClient) completeStreams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.complete
}

func (c *replicaClient) problem(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.problems) < 5 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// run opens stream after stream until ctx ends.
func (c *replicaClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = c.stream(ctx) // an ended stream is what this client expects
		// Envoy and grpc-go back off a little before the next stream.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
		}
	}
}

func (c *replicaClient) stream(ctx context.Context) error {
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resourcev3.ClusterType}); err != nil {
		return err
	}
	var (
		clusters, assignments map[string]proto.Message
		edsNames              []string
		edsVersion, edsNonce  string
		completed             bool
	)
	for {
		resp, err := ads.Recv()
		if err != nil {
			return err
		}
		switch resp.GetTypeUrl() {
		case resourcev3.ClusterType:
			clusters, edsNames = c.checkClusters(resp)
			if err := ads.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType,
				VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				return err
			}
			if err := ads.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: edsNames,
				VersionInfo: edsVersion, ResponseNonce: edsNonce}); err != nil {
				return err
			}
		case resourcev3.EndpointType:
			assignments = c.checkAssignments(resp)
			edsVersion, edsNonce = resp.GetVersionInfo(), resp.GetNonce()
			if err := ads.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: edsNames,
				VersionInfo: edsVersion, ResponseNonce: edsNonce}); err != nil {
				return err
			}
		default:
			c.problem("unasked type %s", resp.GetTypeUrl())
			continue
		}
		if clusters == nil || !hasAll(assignments, edsNames) {
			continue // warming, as Envoy: the previous config stays in use
		}
		next := make(map[string]proto.Message, len(clusters)+len(assignments))
		for n, r := range clusters {
			next["cds/"+n] = r
		}
		for _, n := range edsNames {
			next["eds/"+n] = assignments[n]
		}
		c.install(next, !completed)
		completed = true
	}
}

// checkClusters decodes a CDS response, reports it when it lacks the wanted
// cluster, and returns it with the names EDS must then be asked for.
func (c *replicaClient) checkClusters(resp *discoveryv3.DiscoveryResponse) (map[string]proto.Message, []string) {
	out := map[string]proto.Message{}
	var eds []string
	for _, a := range resp.GetResources() {
		cl := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(cl); err != nil {
			c.problem("CDS: %v", err)
			continue
		}
		out[cl.GetName()] = cl
		if cl.GetType() == clusterv3.Cluster_EDS {
			eds = append(eds, cl.GetName())
		}
	}
	if out[c.want.cluster] == nil {
		c.problem("a CDS response of %d clusters without %s", len(out), c.want.cluster)
	}
	slices.Sort(eds)
	return out, eds
}

// checkAssignments decodes an EDS response and reports it when the wanted
// cluster's endpoints are not all there.
func (c *replicaClient) checkAssignments(resp *discoveryv3.DiscoveryResponse) map[string]proto.Message {
	out := map[string]proto.Message{}
	for _, a := range resp.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			c.problem("EDS: %v", err)
			continue
		}
		out[cla.GetClusterName()] = cla
	}
	cla, _ := out[c.want.cluster].(*endpointv3.ClusterLoadAssignment)
	var got []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			got = append(got, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, c.want.endpoints) {
		c.problem("an EDS response with endpoints %v for %s, want %v", got, c.want.cluster, c.want.endpoints)
	}
	return out
}

func hasAll(m map[string]proto.Message, names []string) bool {
	for _, n := range names {
		if m[n] == nil {
			return false
		}
	}
	return true
}

// install makes next the client's config. The first complete config of a
// new stream must equal the one before it: nothing changed in the mesh, so
// a client that moved to another replica must hold exactly what it held.
func (c *replicaClient) install(next map[string]proto.Message, newStream bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if newStream {
		c.complete++
		if c.config != nil {
			if diff := configDiff(c.config, next); diff != "" {
				if len(c.problems) < 5 {
					c.problems = append(c.problems, "config changed across a reconnection: "+diff)
				}
			} else {
				c.identicalMoves++
			}
		}
	}
	c.config = next
}

func configDiff(a, b map[string]proto.Message) string {
	for name, r := range a {
		if !proto.Equal(r, b[name]) {
			return name + " differs or is missing"
		}
	}
	for name := range b {
		if a[name] == nil {
			return name + " is new"
		}
	}
	return ""
}

// replicasValidator is the default revision's validator in istio-system,
// whose caBundle the leader keeps.
const replicasValidator = "istio-validator-istio-system"

const replicasWorldYAML = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: istio-validator-istio-system
  labels: {istio.io/rev: default}
webhooks:
- name: rev.validation.istio.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig: {url: "https://127.0.0.1:9/validate"}
  # A kind this test never writes: the webhook is here for its caBundle.
  rules: [{operations: [CREATE], apiGroups: [networking.istio.io], apiVersions: ["*"], resources: [destinationrules]}]
---
apiVersion: v1
kind: Namespace
metadata: {name: replicas}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: istio}
spec: {controller: istio.io/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: istio-ingressgateway, namespace: istio-system}
spec:
  type: LoadBalancer
  selector: {istio: ingressgateway}
  ports:
  - {name: http2, port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: replicas}
spec:
  selector: {app: echo}
  ports:
  - {name: grpc, port: 7070, targetPort: 7070}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo
  namespace: replicas
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports: [{name: grpc, port: 7070}]
endpoints:
- addresses: ["10.244.2.10"]
  conditions: {ready: true}
- addresses: ["10.244.2.11"]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: replicas}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 8080, targetPort: 8080}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: replicas}
spec:
  ingressClassName: istio
  rules:
  - host: web.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 8080}}}}
`
