//go:build !vtprotobuf

package loadassign

import (
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

func benchmarkVTProto(b *testing.B, _ *endpoint.ClusterLoadAssignment) {
	b.Skip("go-control-plane compiles its MarshalVT methods only under -tags vtprotobuf")
}
