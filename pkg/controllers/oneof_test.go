package controllers

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func TestCheckOneofs(t *testing.T) {
	cases := []struct {
		name, spec, wantErr string
	}{
		{name: "one policy", spec: "trafficPolicy: {loadBalancer: {simple: RANDOM, localityLbSetting: {enabled: true}}}"},
		{
			name:    "simple and consistent hash",
			spec:    "trafficPolicy: {loadBalancer: {simple: RANDOM, consistentHash: {useSourceIp: true}}}",
			wantErr: "spec.trafficPolicy.loadBalancer: consistentHash and simple are mutually exclusive",
		},
		{
			name:    "two hash keys in a subset's port settings",
			spec:    "subsets: [{name: a, trafficPolicy: {portLevelSettings: [{port: {number: 80}, loadBalancer: {consistentHash: {httpHeaderName: x, useSourceIp: true}}}]}}]",
			wantErr: "spec.subsets[0].trafficPolicy.portLevelSettings[0].loadBalancer.consistentHash: httpHeaderName and useSourceIp",
		},
		{
			name:    "ring hash and maglev, proto field names",
			spec:    "traffic_policy: {load_balancer: {consistent_hash: {use_source_ip: true, ring_hash: {}, maglev: {}}}}",
			wantErr: "maglev and ring_hash are mutually exclusive",
		},
		{name: "null member ignored", spec: "trafficPolicy: {loadBalancer: {simple: RANDOM, consistentHash: null}}"},
		{name: "unknown fields ignored", spec: "future: {simple: 1, consistentHash: 2}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var spec any
			if err := yaml.Unmarshal([]byte(tc.spec), &spec); err != nil {
				t.Fatal(err)
			}
			err := checkOneofs(specDescriptors[schema.GroupKind{Group: "networking.istio.io", Kind: "DestinationRule"}], spec, "spec")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
