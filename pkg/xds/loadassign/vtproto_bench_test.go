//go:build vtprotobuf

package loadassign

import (
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

func benchmarkVTProto(b *testing.B, msg *endpoint.ClusterLoadAssignment) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := msg.MarshalVTStrict(); err != nil {
			b.Fatal(err)
		}
	}
}
