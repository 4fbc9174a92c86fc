package xdstest

import (
	"context"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

// transport is one ADS stream, state of the world or delta.
type transport interface {
	send(SentRequest) error
	recv() (*response, error)
}

// response is a DiscoveryResponse or DeltaDiscoveryResponse.
type response struct {
	typeURL, version, nonce string
	resources               []wireResource
	removed                 []string // delta only
}

// wireResource is one resource as received; name and version are the delta
// Resource's (empty in SotW, where only the packed resource names itself
// and versions are per type).
type wireResource struct {
	name, version string
	any           *anypb.Any
}

// errorDetail is what Envoy puts in a NACK: code INTERNAL and the reason
// (grpc_mux_impl.cc, onDiscoveryResponse).
func errorDetail(msg string) *status.Status {
	if msg == "" {
		return nil
	}
	return &status.Status{Code: int32(codes.Internal), Message: msg}
}

type sotwTransport struct {
	stream   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     *corev3.Node
	nodeSent bool
}

func openSotW(ctx context.Context, conn grpc.ClientConnInterface, node *corev3.Node) (transport, error) {
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	return &sotwTransport{stream: stream, node: node}, nil
}

func (s *sotwTransport) send(r SentRequest) error {
	req := &discoveryv3.DiscoveryRequest{
		VersionInfo:   r.VersionInfo,
		ResourceNames: r.ResourceNames,
		TypeUrl:       r.TypeURL,
		ResponseNonce: r.ResponseNonce,
		ErrorDetail:   errorDetail(r.ErrorDetail),
	}
	if !s.nodeSent {
		req.Node, s.nodeSent = s.node, true
	}
	return s.stream.Send(req)
}

func (s *sotwTransport) recv() (*response, error) {
	resp, err := s.stream.Recv()
	if err != nil {
		return nil, err
	}
	out := &response{typeURL: resp.GetTypeUrl(), version: resp.GetVersionInfo(), nonce: resp.GetNonce()}
	for _, a := range resp.GetResources() {
		out.resources = append(out.resources, wireResource{any: a})
	}
	return out, nil
}
