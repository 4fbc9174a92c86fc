package validation_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/validation"
)

// vsSeeds reach every kind of route: weighted HTTP routes with matches,
// redirects, direct responses, rewrites, faults, CORS, mirrors, header
// operations, delegation, and TLS and TCP routes.
var vsSeeds = []string{
	`{"hosts":["echo"],"http":[{"route":[{"destination":{"host":"echo","subset":"v2"}}]}]}`,
	`{"hosts":["r","*.example.com"],"exportTo":["."],"http":[{"name":"a","match":[{"uri":{"prefix":"/api"},"headers":{"x":{"regex":"^a+$"}},"queryParams":{"q":{"exact":"1"}},"port":80,"sourceLabels":{"app":"p"}}],` +
		`"route":[{"destination":{"host":"r","subset":"v1","port":{"number":80}},"weight":90,"headers":{"request":{"set":{"x-a":"b"}}}},{"destination":{"host":"r"},"weight":10}],` +
		`"timeout":"10s","retries":{"attempts":3,"perTryTimeout":"2s","retryOn":"5xx,503"},"corsPolicy":{"allowOrigins":[{"exact":"https://a"}],"allowMethods":["GET"],"maxAge":"1h"},` +
		`"mirror":{"host":"shadow"},"mirrorPercentage":{"value":5},"mirrors":[{"destination":{"host":"m"},"percentage":{"value":1}}]}]}`,
	`{"hosts":["a"],"http":[{"redirect":{"uri":"/n","redirectCode":301,"scheme":"https","port":443}},{"directResponse":{"status":503,"body":{"string":"no"}}},` +
		`{"rewrite":{"uriRegexRewrite":{"match":"^/(.*)$","rewrite":"/v2/\\1"}},"fault":{"delay":{"fixedDelay":"5ms","percentage":{"value":10}},"abort":{"grpcStatus":"UNAVAILABLE"}},"route":[{"destination":{"host":"a"}}]},` +
		`{"delegate":{"name":"b","namespace":"c"}}]}`,
	`{"hosts":["*.example.com"],"gateways":["istio-system/gw","mesh"],"tls":[{"match":[{"sniHosts":["a.example.com"],"port":443,"destinationSubnets":["10.0.0.0/8"]}],"route":[{"destination":{"host":"a"}}]}],` +
		`"tcp":[{"match":[{"port":5432,"sourceSubnet":"192.168.0.0/16"}],"route":[{"destination":{"host":"db"},"weight":1}]}]}`,
}

// FuzzValidateVirtualService runs a VirtualService spec, as JSON, through
// the steps a source takes: the strict field check, the typed decoder, the
// validator and the conversion. Each step may refuse, but never panics,
// and:
//   - every problem is a field error whose path starts at the object's
//     root (spec or metadata), so that it can be located in a file;
//   - a spec the field check accepts, the typed decoder reads;
//   - the validator's verdict does not depend on when it is asked, and it
//     leaves the spec as it was;
//   - a VirtualService the validator accepts converts without error,
//     carrying the spec and the object's name.
func FuzzValidateVirtualService(f *testing.F) {
	for _, s := range vsSeeds {
		f.Add("vs", "ns", []byte(s))
	}
	// The VirtualServices of the route generators' inputs and of the
	// examples, where there are some.
	addSpecSeeds(f, "VirtualService", "../xds/envoygen/testdata/*/*.yaml", "../../examples/*/*.yaml")
	f.Fuzz(func(t *testing.T, name, namespace string, spec []byte) {
		var fields any
		d := json.NewDecoder(bytes.NewReader(spec))
		d.UseNumber()
		if !json.Valid(spec) || d.Decode(&fields) != nil {
			return // not one JSON value: the file decoder's concern (FuzzDecodeFile)
		}
		if err := validation.CheckFields(validation.VirtualServiceSpec, fields, "spec"); err != nil {
			checkFieldErrors(t, err, "spec")
			return
		}
		var vs networking.VirtualService
		if err := json.Unmarshal(spec, &vs); err != nil {
			t.Fatalf("the field check accepted a spec the typed decoder refuses: %v\n%s", err, spec)
		}
		before := proto.Clone(&vs)
		verdict := validation.ValidateVirtualService(name, namespace, &vs)
		if !proto.Equal(before, &vs) {
			t.Fatalf("validation changed the spec:\n%v\n%v", before, &vs)
		}
		again := validation.ValidateVirtualService(name, namespace, proto.Clone(&vs).(*networking.VirtualService))
		if errText(verdict) != errText(again) {
			t.Fatalf("two validations of one VirtualService disagree:\n%v\n%v", verdict, again)
		}
		if verdict != nil {
			checkFieldErrors(t, verdict, "spec", "metadata")
			return
		}
		meta := &metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: "1"}
		cfg, err := controllers.ConvertVirtualService(meta, &vs)
		if err != nil {
			t.Fatalf("validated VirtualService does not convert: %v", err)
		}
		if cfg.Name != name || cfg.Namespace != namespace || cfg.Spec != proto.Message(&vs) {
			t.Fatalf("converted VirtualService %s/%s does not carry the object", cfg.Namespace, cfg.Name)
		}
	})
}
