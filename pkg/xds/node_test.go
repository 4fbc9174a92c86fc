package xds

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestParseNode(t *testing.T) {
	meta := func(fields map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name    string
		node    *corev3.Node
		want    *model.Proxy
		wantErr string
	}{
		{
			name: "istio proxyless bootstrap",
			node: &corev3.Node{
				Id: "sidecar~10.0.0.1~client-0.default~default.svc.cluster.local",
				Metadata: meta(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default", "INSTANCE_IPS": "10.0.0.1,fd00::1",
					"LABELS": map[string]any{"app": "client", "version": "v1"}, "CLUSTER_ID": "Kubernetes"}),
				Locality: &corev3.Locality{Region: "eu", Zone: "eu-1", SubZone: "rack-2"},
			},
			want: &model.Proxy{
				ID: "sidecar~10.0.0.1~client-0.default~default.svc.cluster.local", Type: model.SidecarProxy,
				IPAddresses: []string{"10.0.0.1", "fd00::1"}, Namespace: "default", DNSDomain: "default.svc.cluster.local",
				Labels: map[string]string{"app": "client", "version": "v1"}, Locality: model.Locality{Region: "eu", Zone: "eu-1", SubZone: "rack-2"},
				ClusterID: "Kubernetes", Generator: "grpc",
			},
		},
		{
			name: "router without metadata takes namespace and IP from the id",
			node: &corev3.Node{Id: "router~10.0.0.9~gw-1.istio-system~istio-system.svc.cluster.local"},
			want: &model.Proxy{
				ID: "router~10.0.0.9~gw-1.istio-system~istio-system.svc.cluster.local", Type: model.Router,
				IPAddresses: []string{"10.0.0.9"}, Namespace: "istio-system", DNSDomain: "istio-system.svc.cluster.local",
			},
		},
		{name: "nil node", node: nil, wantErr: "must carry a node"},
		{name: "empty id", node: &corev3.Node{}, wantErr: "want type~ip"},
		{name: "three fields", node: &corev3.Node{Id: "sidecar~10.0.0.1~x.default"}, wantErr: "want type~ip"},
		{
			name: "node proxy (ztunnel)",
			node: &corev3.Node{Id: "ztunnel~10.0.0.5~ztunnel-x2x.istio-system~istio-system.svc.cluster.local"},
			want: &model.Proxy{
				ID: "ztunnel~10.0.0.5~ztunnel-x2x.istio-system~istio-system.svc.cluster.local", Type: model.NodeProxy,
				IPAddresses: []string{"10.0.0.5"}, Namespace: "istio-system", DNSDomain: "istio-system.svc.cluster.local",
			},
		},
		{name: "unknown type", node: &corev3.Node{Id: "waypoint~10.0.0.1~x.default~default.svc.cluster.local"}, wantErr: "not sidecar, router or ztunnel"},
		{name: "bad ip in id", node: &corev3.Node{Id: "sidecar~not-an-ip~x.default~default.svc.cluster.local"}, wantErr: "invalid IP"},
		{name: "bad instance ip", node: &corev3.Node{Id: proxyID("x"), Metadata: meta(map[string]any{"INSTANCE_IPS": "10.0.0.1,,"})}, wantErr: "invalid IP"},
		{name: "no namespace anywhere", node: &corev3.Node{Id: "sidecar~10.0.0.1~x~.svc.cluster.local"}, wantErr: "no namespace"},
		{name: "labels not a struct", node: &corev3.Node{Id: proxyID("x"), Metadata: meta(map[string]any{"LABELS": "app=x"})}, wantErr: "LABELS must be a struct"},
		{name: "label not a string", node: &corev3.Node{Id: proxyID("x"), Metadata: meta(map[string]any{"LABELS": map[string]any{"n": 1.0}})}, wantErr: "LABELS[n] must be a string"},
		{name: "generator not a string", node: &corev3.Node{Id: proxyID("x"), Metadata: meta(map[string]any{"GENERATOR": true})}, wantErr: "GENERATOR must be a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseNode(tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("proxy (-want +got):\n%s", diff)
			}
		})
	}
}
