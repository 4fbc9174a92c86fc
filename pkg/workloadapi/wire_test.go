package workloadapi

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestWireFacts pins the names and numbers that make this API readable by
// ztunnel and istiod (Istio's pkg/workloadapi/workload.proto), so that an
// edit of the .proto that would break the wire fails here, not in a cluster.
func TestWireFacts(t *testing.T) {
	fields := []struct {
		msg    protoreflect.ProtoMessage
		field  string
		number protoreflect.FieldNumber
	}{
		{&Address{}, "workload", 1},
		{&Address{}, "service", 2},
		{&Service{}, "name", 1},
		{&Service{}, "namespace", 2},
		{&Service{}, "hostname", 3},
		{&Service{}, "addresses", 4},
		{&Service{}, "ports", 5},
		{&Service{}, "subject_alt_names", 6},
		{&Service{}, "waypoint", 7},
		{&Service{}, "load_balancing", 8},
		{&Service{}, "ip_families", 9},
		{&Service{}, "canonical", 11},
		{&Service{}, "visibility", 14},
		{&Workload{}, "uid", 20},
		{&Workload{}, "name", 1},
		{&Workload{}, "namespace", 2},
		{&Workload{}, "addresses", 3},
		{&Workload{}, "hostname", 21},
		{&Workload{}, "network", 4},
		{&Workload{}, "tunnel_protocol", 5},
		{&Workload{}, "trust_domain", 6},
		{&Workload{}, "service_account", 7},
		{&Workload{}, "waypoint", 8},
		{&Workload{}, "network_gateway", 19},
		{&Workload{}, "node", 9},
		{&Workload{}, "canonical_name", 10},
		{&Workload{}, "canonical_revision", 11},
		{&Workload{}, "workload_type", 12},
		{&Workload{}, "workload_name", 13},
		{&Workload{}, "native_tunnel", 14},
		{&Workload{}, "application_tunnel", 23},
		{&Workload{}, "services", 22},
		{&Workload{}, "authorization_policies", 16},
		{&Workload{}, "status", 17},
		{&Workload{}, "cluster_id", 18},
		{&Workload{}, "locality", 24},
		{&Workload{}, "network_mode", 25},
		{&Workload{}, "capacity", 27},
		{&PortList{}, "ports", 1},
		{&Port{}, "service_port", 1},
		{&Port{}, "target_port", 2},
		{&Port{}, "app_protocol", 3},
		{&NetworkAddress{}, "network", 1},
		{&NetworkAddress{}, "address", 2},
		{&NetworkAddress{}, "length", 3},
		{&NamespacedHostname{}, "namespace", 1},
		{&NamespacedHostname{}, "hostname", 2},
		{&GatewayAddress{}, "hostname", 1},
		{&GatewayAddress{}, "address", 2},
		{&GatewayAddress{}, "hbone_mtls_port", 3},
		{&Locality{}, "region", 1},
		{&Locality{}, "zone", 2},
		{&Locality{}, "subzone", 3},
	}
	for _, f := range fields {
		desc := f.msg.ProtoReflect().Descriptor()
		if desc.ParentFile().Package() != "istio.workload" {
			t.Fatalf("%s: package %s, want istio.workload", desc.FullName(), desc.ParentFile().Package())
		}
		fd := desc.Fields().ByName(protoreflect.Name(f.field))
		if fd == nil {
			t.Errorf("%s has no field %s", desc.FullName(), f.field)
			continue
		}
		if fd.Number() != f.number {
			t.Errorf("%s.%s is field %d, want %d", desc.FullName(), f.field, fd.Number(), f.number)
		}
	}

	enums := []struct {
		value  protoreflect.Enum
		name   string
		number protoreflect.EnumNumber
	}{
		{TunnelProtocol_NONE, "NONE", 0},
		{TunnelProtocol_HBONE, "HBONE", 1},
		{TunnelProtocol_LEGACY_ISTIO_MTLS, "LEGACY_ISTIO_MTLS", 2},
		{WorkloadStatus_HEALTHY, "HEALTHY", 0},
		{WorkloadStatus_UNHEALTHY, "UNHEALTHY", 1},
		{WorkloadType_DEPLOYMENT, "DEPLOYMENT", 0},
		{WorkloadType_CRONJOB, "CRONJOB", 1},
		{WorkloadType_POD, "POD", 2},
		{WorkloadType_JOB, "JOB", 3},
		{AppProtocol_HTTP11, "HTTP11", 1},
		{AppProtocol_GRPC, "GRPC", 3},
		{IPFamilies_DUAL, "DUAL", 3},
		{NetworkMode_HOST_NETWORK, "HOST_NETWORK", 1},
	}
	for _, e := range enums {
		v := e.value.Descriptor().Values().ByNumber(e.value.Number())
		if v == nil || string(v.Name()) != e.name || v.Number() != e.number {
			t.Errorf("%s: %v, want %s = %d", e.value.Descriptor().FullName(), v, e.name, e.number)
		}
	}
	if got := (&Address{}).ProtoReflect().Descriptor().FullName(); got != "istio.workload.Address" {
		t.Errorf("Address is %s, want istio.workload.Address", got)
	}
}
