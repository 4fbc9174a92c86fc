package nodeproxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/pkg/workloadapi"
)

// The types a node proxy subscribes to, as ztunnel does. Authorization is
// asked for so that a control plane with policies can send them; this node
// proxy enforces none yet and only acknowledges what comes.
const (
	addressType       = "type.googleapis.com/istio.workload.Address"
	authorizationType = "type.googleapis.com/istio.security.Authorization"
)

// wdsClient keeps a Directory in step with the control plane over delta
// ADS, reconnecting with backoff until its context ends.
type wdsClient struct {
	conn grpc.ClientConnInterface
	node *corev3.Node
	dir  *Directory
	log  *slog.Logger
	// synced is closed after the first Address response is applied.
	synced chan struct{}
	// onResponse, when set, sees every response applied (for metrics).
	onResponse func(updated, removed int)
}

func (c *wdsClient) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		c.log.Warn("WDS stream ended; reconnecting", "err", err, "after", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// stream runs one delta ADS stream. It subscribes to every Address
// (wildcard) and tells the server which versions it already holds, so that
// after a reconnect the server sends only what changed and removes what
// went away meanwhile.
func (c *wdsClient) stream(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	known := c.dir.knownVersions()
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: c.node, TypeUrl: addressType, ResourceNamesSubscribe: []string{"*"}, InitialResourceVersions: known,
	}); err != nil {
		return err
	}
	if err := s.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: authorizationType, ResourceNamesSubscribe: []string{"*"}}); err != nil {
		return err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		ack := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
		if resp.GetTypeUrl() == addressType {
			if err := c.apply(resp); err != nil {
				// A response this proxy cannot read is refused whole,
				// and the directory keeps what it had.
				c.log.Error("WDS response refused", "err", err, "nonce", resp.GetNonce())
				ack.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			}
		}
		if err := s.Send(ack); err != nil {
			return err
		}
	}
}

func (c *wdsClient) apply(resp *discoveryv3.DeltaDiscoveryResponse) error {
	updated := make(map[string]*workloadapi.Address, len(resp.GetResources()))
	versions := make(map[string]string, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		a := &workloadapi.Address{}
		if err := r.GetResource().UnmarshalTo(a); err != nil {
			return fmt.Errorf("resource %q: %w", r.GetName(), err)
		}
		updated[r.GetName()] = a
		versions[r.GetName()] = r.GetVersion()
	}
	c.dir.applyVersioned(updated, versions, resp.GetRemovedResources())
	if c.onResponse != nil {
		c.onResponse(len(updated), len(resp.GetRemovedResources()))
	}
	select {
	case <-c.synced:
	default:
		close(c.synced)
	}
	return nil
}

// xdsNode is the node proxy's xDS node, named as Istio names a ztunnel:
// ztunnel~<ip>~<pod>.<ns>~<ns>.svc.<domain>.
func xdsNode(ip, pod, namespace, domain string) *corev3.Node {
	meta, _ := structpb.NewStruct(map[string]any{"NAMESPACE": namespace, "INSTANCE_IPS": ip})
	return &corev3.Node{
		Id:       "ztunnel~" + ip + "~" + pod + "." + namespace + "~" + namespace + ".svc." + domain,
		Metadata: meta,
	}
}
