package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshpilot/meshpilot/pkg/model"
)

// The mesh proxies TCP only, so a Service's model keeps its TCP ports and
// nothing else: every lookup by number then finds the one port the mesh
// serves on it.
func TestConvertServiceKeepsTCPPorts(t *testing.T) {
	port := func(name string, number int32, proto corev1.Protocol) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: number, Protocol: proto, TargetPort: intstr.FromInt32(number)}
	}
	dnsTCP := &model.Port{Name: "dns-tcp", Port: 53, Protocol: model.ProtocolUnknown, TargetPort: 53}
	metrics := &model.Port{Name: "metrics", Port: 9153, Protocol: model.ProtocolUnknown, TargetPort: 9153}
	cases := []struct {
		name  string
		ports []corev1.ServicePort
		want  []*model.Port
	}{
		{
			name:  "kube-dns: UDP 53 listed before TCP 53",
			ports: []corev1.ServicePort{port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP), port("metrics", 9153, corev1.ProtocolTCP)},
			want:  []*model.Port{dnsTCP, metrics},
		},
		{
			name:  "TCP 53 listed before UDP 53",
			ports: []corev1.ServicePort{port("metrics", 9153, ""), port("dns-tcp", 53, ""), port("dns", 53, corev1.ProtocolUDP)},
			want:  []*model.Port{dnsTCP, metrics},
		},
		{
			name:  "only UDP ports: none",
			ports: []corev1.ServicePort{port("dns", 53, corev1.ProtocolUDP)},
		},
		{
			name:  "SCTP is not proxied either, whatever the name says",
			ports: []corev1.ServicePort{port("http-signalling", 80, corev1.ProtocolSCTP), port("dns-tcp", 53, corev1.ProtocolTCP)},
			want:  []*model.Port{dnsTCP},
		},
		{
			// Istio reads the udp- prefix as the UDP protocol and skips the port.
			name:  "a TCP port named udp-*",
			ports: []corev1.ServicePort{port("udp-stats", 8125, corev1.ProtocolTCP), port("metrics", 9153, corev1.ProtocolTCP)},
			want:  []*model.Port{metrics},
		},
		{
			// The API server refuses these; a file source does not.
			name:  "two TCP ports of one number: the first",
			ports: []corev1.ServicePort{port("dns-tcp", 53, ""), port("dns-again", 53, corev1.ProtocolTCP)},
			want:  []*model.Port{dnsTCP},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: tc.ports}}
			if diff := cmp.Diff(tc.want, ConvertService(svc, "cluster.local").Ports); diff != "" {
				t.Errorf("ports (-want +got)\n%s", diff)
			}
		})
	}
}

// An EndpointSlice lists its ports with their protocols; the endpoints of
// a UDP or SCTP port must not join the TCP port of the same name, nor give
// a proxy an address it would dial over TCP.
func TestConvertEndpointSliceKeepsTCPPorts(t *testing.T) {
	slicePort := func(name string, number int32, proto corev1.Protocol) discoveryv1.EndpointPort {
		p := discoveryv1.EndpointPort{Name: &name, Port: &number}
		if proto != "" {
			p.Protocol = &proto
		}
		return p
	}
	endpoint := func(name string, number uint32) *model.Endpoint {
		return &model.Endpoint{Address: "10.244.0.2", Port: number, ServicePortName: name, Namespace: "ns"}
	}
	cases := []struct {
		name  string
		ports []discoveryv1.EndpointPort
		want  []*model.Endpoint
	}{
		{
			name: "kube-dns",
			ports: []discoveryv1.EndpointPort{slicePort("dns", 53, corev1.ProtocolUDP), slicePort("dns-tcp", 53, corev1.ProtocolTCP),
				slicePort("metrics", 9153, corev1.ProtocolTCP)},
			want: []*model.Endpoint{endpoint("dns-tcp", 53), endpoint("metrics", 9153)},
		},
		{
			// The mirroring controller copies a selectorless Service's
			// Endpoints port by port, so a single unnamed port can be UDP.
			name:  "an unnamed UDP port",
			ports: []discoveryv1.EndpointPort{slicePort("", 53, corev1.ProtocolUDP)},
		},
		{
			name:  "SCTP",
			ports: []discoveryv1.EndpointPort{slicePort("", 53, corev1.ProtocolSCTP)},
		},
		{
			name:  "no protocol is TCP",
			ports: []discoveryv1.EndpointPort{slicePort("", 53, "")},
			want:  []*model.Endpoint{endpoint("", 53)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			slice := testSlice("s", tc.ports, discoveryv1.Endpoint{Addresses: []string{"10.244.0.2"}})
			if diff := cmp.Diff(tc.want, ConvertEndpointSlice(slice, nil)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
