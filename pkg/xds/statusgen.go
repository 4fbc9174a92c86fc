package xds

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Istio's debug types: istioctl asks for them over ADS, as for any other
// type, and reads the answer as CSDS ClientConfigs.
const (
	DebugTypePrefix = "istio.io/debug/"
	// DebugSyncType is what `istioctl proxy-status` asks for: one
	// envoy.service.status.v3.ClientConfig per connected proxy.
	DebugSyncType = DebugTypePrefix + "syncz"
)

// SyncGenerator answers DebugSyncType with the sync state of every proxy
// connection. It is a generator like the others so that the type is served
// on both xDS ports with the same authentication, but it reads the server's
// connections rather than the push context, and is never shared between
// proxies (a func generator is not comparable).
//
// A caller that proved an identity from a namespace other than
// systemNamespace sees only the proxies of its own namespace, as istiod
// restricts its debug types; a plaintext caller (15010, which never carries
// secrets) and the system namespace see every proxy.
func (s *Server) SyncGenerator(systemNamespace string) Generator {
	return GeneratorFunc(func(caller *model.Proxy, _ *pushcontext.PushContext, _ *model.WatchedResource, _ *model.PushRequest) (model.Resources, error) {
		only := ""
		if id := caller.VerifiedIdentity; id != nil && id.Namespace != systemNamespace {
			only = id.Namespace
		}
		conns := s.connections()
		slices.SortFunc(conns, func(a, b *connection) int {
			return cmp.Or(cmp.Compare(a.proxy.ID, b.proxy.ID), cmp.Compare(a.id, b.id))
		})
		out := make(model.Resources, 0, len(conns))
		for _, c := range conns {
			if only != "" && c.proxy.Namespace != only {
				continue
			}
			cfg, ok := c.clientConfig()
			if !ok {
				continue
			}
			a, err := anypb.New(cfg)
			if err != nil {
				return nil, err
			}
			// Named by connection, not node ID: two streams of one node
			// are two entries, and a client keys resources by name.
			out = append(out, model.Resource{Name: c.id, Resource: a})
		}
		return out, nil
	})
}

// ControlPlaneID is how the control plane names itself in the
// control_plane.identifier of debug responses: istiod's JSON shape, which
// istioctl proxy-status parses for its ISTIOD column and keys replies by.
type ControlPlaneID struct {
	Component string           `json:"Component"`
	ID        string           `json:"ID"`
	Info      ControlPlaneInfo `json:"Info"`
}

// ControlPlaneInfo is the build information inside ControlPlaneID.
type ControlPlaneInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

// DebugIdentityInterceptor stamps id on the responses of Istio's debug
// types, as istiod does; proxy responses go out as they are, since Envoy
// and gRPC ignore the field and it would cost bytes on every push.
func DebugIdentityInterceptor(id ControlPlaneID) grpc.StreamServerInterceptor {
	b, _ := json.Marshal(id) // a struct of strings always marshals
	cp := &corev3.ControlPlane{Identifier: string(b)}
	field := controlPlaneField(cp)
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &identifyingStream{ServerStream: ss, cp: cp, cpField: field})
	}
}

type identifyingStream struct {
	grpc.ServerStream
	cp      *corev3.ControlPlane
	cpField []byte // cp as the marshalled control_plane field
}

func (s *identifyingStream) SendMsg(m any) error {
	switch r := m.(type) {
	case *discoveryv3.DiscoveryResponse:
		// Each response is built for one send, so setting a field on it
		// touches nothing another stream reads.
		if strings.HasPrefix(r.GetTypeUrl(), DebugTypePrefix) && r.ControlPlane == nil {
			r.ControlPlane = s.cp
		}
	case *discoveryv3.DeltaDiscoveryResponse:
		if strings.HasPrefix(r.GetTypeUrl(), DebugTypePrefix) && r.ControlPlane == nil {
			r.ControlPlane = s.cp
		}
	case *encodedResponse:
		if strings.HasPrefix(r.typeURL, DebugTypePrefix) && r.controlPlane == nil {
			r.controlPlane = s.cpField
		}
	}
	return s.ServerStream.SendMsg(m)
}
