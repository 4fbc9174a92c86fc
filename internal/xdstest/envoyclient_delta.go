package xdstest

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
)

// deltaTransport is an incremental ADS stream.
type deltaTransport struct {
	stream   discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node     *corev3.Node
	nodeSent bool
}

func openDelta(ctx context.Context, conn grpc.ClientConnInterface, node *corev3.Node) (transport, error) {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	return &deltaTransport{stream: stream, node: node}, nil
}

func (d *deltaTransport) send(r SentRequest) error {
	req := &discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:                  r.TypeURL,
		ResourceNamesSubscribe:   r.Subscribe,
		ResourceNamesUnsubscribe: r.Unsubscribe,
		InitialResourceVersions:  r.InitialResourceVersions,
		ResponseNonce:            r.ResponseNonce,
		ErrorDetail:              errorDetail(r.ErrorDetail),
	}
	if !d.nodeSent {
		req.Node, d.nodeSent = d.node, true
	}
	return d.stream.Send(req)
}

func (d *deltaTransport) recv() (*response, error) {
	resp, err := d.stream.Recv()
	if err != nil {
		return nil, err
	}
	out := &response{
		typeURL: resp.GetTypeUrl(), version: resp.GetSystemVersionInfo(), nonce: resp.GetNonce(),
		removed: resp.GetRemovedResources(),
	}
	for _, r := range resp.GetResources() {
		out.resources = append(out.resources, wireResource{name: r.GetName(), version: r.GetVersion(), any: r.GetResource()})
	}
	return out, nil
}
