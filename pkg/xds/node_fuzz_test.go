package xds

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Which node metadata a fuzz case sets, and how.
const (
	fuzzMetaNamespace = 1 << iota
	fuzzMetaIPs
	fuzzMetaGenerator
	fuzzMetaLabels
	fuzzMetaBadGenerator // GENERATOR is a number
	fuzzMetaBadLabels    // LABELS is a string
	fuzzMetaBadLabel     // a label's value is a bool
)

// FuzzParseNode builds a node from an ID's four parts and some metadata and
// checks parseNode against what Istio's ID format says: an ID of four
// parts (none holding "~") with a known type, usable IP addresses (from
// INSTANCE_IPS, else the ID) and a namespace (from NAMESPACE, else the
// domain's first label) parses, and the proxy it gives spells the same ID
// back; anything else is an error that names the ID or the metadata key.
func FuzzParseNode(f *testing.F) {
	// The repository's bootstraps are the real IDs and metadata.
	files, _ := filepath.Glob("../../examples/bootstrap/*.json")
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var boot struct {
			Node struct {
				ID       string `json:"id"`
				Metadata struct {
					Generator string            `json:"GENERATOR"`
					Namespace string            `json:"NAMESPACE"`
					IPs       string            `json:"INSTANCE_IPS"`
					Labels    map[string]string `json:"LABELS"`
				} `json:"metadata"`
			} `json:"node"`
		}
		if err := json.Unmarshal(raw, &boot); err != nil {
			f.Fatalf("%s: %v", file, err)
		}
		parts := strings.SplitN(boot.Node.ID, "~", 4)
		if len(parts) != 4 {
			f.Fatalf("%s: node id %q", file, boot.Node.ID)
		}
		m := boot.Node.Metadata
		var key, value string
		for k, v := range m.Labels {
			key, value = k, v
		}
		f.Add(parts[0], parts[1], parts[2], parts[3], m.Namespace, m.IPs, m.Generator, key, value,
			uint8(fuzzMetaNamespace|fuzzMetaIPs|fuzzMetaGenerator|fuzzMetaLabels))
	}
	f.Add("router", "10.0.0.9", "gw-1.istio-system", "istio-system.svc.cluster.local", "", "", "", "", "", uint8(0))
	f.Add("ztunnel", "fd00::5", "ztunnel-x.istio-system", "istio-system.svc.cluster.local", "", " 10.0.0.5 , fd00::5", "", "", "", uint8(fuzzMetaIPs))
	f.Add("sidecar", "10.0.0.1", "x", ".svc.cluster.local", "", "", "", "", "", uint8(0))
	f.Add("waypoint", "10.0.0.1", "x.default", "default.svc.cluster.local", "", "", "", "", "", uint8(0))
	f.Add("sidecar", "10.0.0.1~1", "x.default", "default.svc.cluster.local", "", "", "", "", "", uint8(0))
	f.Add("sidecar", "10.0.0.1", "x.default", "default.svc.cluster.local", "ns", "10.0.0.1,,", "grpc", "app", "x", uint8(0x7f))
	f.Fuzz(func(t *testing.T, typ, ip, pod, domain, namespace, ips, generator, labelKey, labelValue string, flags uint8) {
		id := strings.Join([]string{typ, ip, pod, domain}, "~")
		fields := map[string]*structpb.Value{}
		if flags&fuzzMetaNamespace != 0 {
			fields[metaNamespace] = structpb.NewStringValue(namespace)
		}
		if flags&fuzzMetaIPs != 0 {
			fields[metaInstanceIPs] = structpb.NewStringValue(ips)
		}
		if flags&fuzzMetaGenerator != 0 {
			fields[metaGenerator] = structpb.NewStringValue(generator)
		}
		labels := map[string]*structpb.Value{}
		if flags&fuzzMetaLabels != 0 {
			labels[labelKey] = structpb.NewStringValue(labelValue)
			fields[metaLabels] = structpb.NewStructValue(&structpb.Struct{Fields: labels})
		}
		if flags&fuzzMetaBadGenerator != 0 {
			fields[metaGenerator] = structpb.NewNumberValue(1)
		}
		if flags&fuzzMetaBadLabels != 0 {
			fields[metaLabels] = structpb.NewStringValue(labelKey + "=" + labelValue)
		}
		if flags&fuzzMetaBadLabel != 0 {
			labels["bad"] = structpb.NewBoolValue(true)
			fields[metaLabels] = structpb.NewStructValue(&structpb.Struct{Fields: labels})
		}
		node := &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: fields}}

		// What the format says, decided here without parseNode's help.
		idOK := !strings.Contains(typ+ip+pod+domain, "~") && (typ == "sidecar" || typ == "router" || typ == "ztunnel")
		ipList := ip
		if flags&fuzzMetaIPs != 0 && ips != "" {
			ipList = ips
		}
		var wantIPs []string
		ipsOK := true
		for _, a := range strings.Split(ipList, ",") {
			a = strings.TrimSpace(a)
			if _, err := netip.ParseAddr(a); err != nil {
				ipsOK = false
			}
			wantIPs = append(wantIPs, a)
		}
		wantNamespace := ""
		if flags&fuzzMetaNamespace != 0 {
			wantNamespace = namespace
		}
		if wantNamespace == "" {
			wantNamespace, _, _ = strings.Cut(domain, ".")
		}
		metaOK := flags&(fuzzMetaBadGenerator|fuzzMetaBadLabels|fuzzMetaBadLabel) == 0
		wantOK := idOK && ipsOK && wantNamespace != "" && metaOK

		p, err := parseNode(node)
		if (err == nil) != wantOK {
			t.Fatalf("parseNode(%q, %v) = %v, %v; want success %v", id, fields, p, err, wantOK)
		}
		if err != nil {
			msg := err.Error()
			// A long id is named clipped (status messages are bounded).
			named := strings.Contains(msg, id) || strings.Contains(msg, strconv.Quote(id)) ||
				strings.Contains(msg, strconv.Quote(clip(id)))
			for _, key := range []string{metaGenerator, metaLabels} {
				named = named || strings.Contains(msg, key)
			}
			if !named && !strings.Contains(msg, "node id") {
				t.Fatalf("error %q names neither the node nor a metadata key", msg)
			}
			return
		}
		// The ID round-trips: the proxy's parts spell it again.
		if p.ID != id || strings.Join([]string{string(p.Type), ip, pod, p.DNSDomain}, "~") != id {
			t.Fatalf("proxy %+v does not spell node id %q", p, id)
		}
		if !slices.Equal(p.IPAddresses, wantIPs) {
			t.Fatalf("IP addresses %q, want %q", p.IPAddresses, wantIPs)
		}
		if p.Namespace != wantNamespace {
			t.Fatalf("namespace %q, want %q", p.Namespace, wantNamespace)
		}
		wantGenerator := ""
		if flags&fuzzMetaGenerator != 0 {
			wantGenerator = generator
		}
		if p.Generator != wantGenerator {
			t.Fatalf("generator %q, want %q", p.Generator, wantGenerator)
		}
		wantLabels := map[string]string{}
		for k, v := range labels {
			wantLabels[k] = v.GetStringValue()
		}
		if flags&fuzzMetaLabels == 0 {
			wantLabels = nil
		}
		if !maps.Equal(p.Labels, wantLabels) {
			t.Fatalf("labels %v, want %v", p.Labels, wantLabels)
		}
	})
}
