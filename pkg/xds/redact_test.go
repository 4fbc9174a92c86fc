package xds

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshpilot/meshpilot/internal/testcerts"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// Stand-ins for key material other than the PEM key: each must vanish from
// debug output.
var (
	ticketKey     = bytes.Repeat([]byte("TICKETKEY"), 9) // Envoy wants 80 bytes
	genericSecret = []byte("GENERIC-SECRET-VALUE")
	keyPassword   = "KEY-PASSWORD-VALUE"
	pkcs12Archive = []byte("PKCS12-ARCHIVE-VALUE")
)

func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

func inlineString(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
}

func tlsCert(certPEM, keyPEM []byte) *tlsv3.TlsCertificate {
	return &tlsv3.TlsCertificate{CertificateChain: inlineBytes(certPEM), PrivateKey: inlineBytes(keyPEM),
		Password: inlineString(keyPassword)}
}

// keyMaterial is every private-key-bearing field the issue names, in the
// places a proxy is sent them: SDS Secrets, and inline certificates inside a
// listener's DownstreamTlsContext and a cluster's UpstreamTlsContext, both
// packed in an Any.
func keyMaterial(certPEM, keyPEM []byte) map[string]model.Resources {
	downstream := &tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{
			CertificateChain: inlineBytes(certPEM), PrivateKey: inlineString(string(keyPEM)),
		}}},
		SessionTicketKeysType: &tlsv3.DownstreamTlsContext_SessionTicketKeys{
			SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{Keys: []*corev3.DataSource{inlineBytes(ticketKey)}}},
	}
	listener := &listenerv3.Listener{Name: "gateway", FilterChains: []*listenerv3.FilterChain{{
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(downstream)}},
	}}}
	upstream := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{
		{CertificateChain: inlineBytes(certPEM), PrivateKey: inlineBytes(keyPEM)},
		{Pkcs12: inlineBytes(pkcs12Archive)},
	}}}
	// A key provider config this binary cannot decode, carrying a key: its
	// bytes cannot be inspected, so they must not be shown.
	provider := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{
		CertificateChain: inlineBytes(certPEM),
		PrivateKeyProvider: &tlsv3.PrivateKeyProvider{ProviderName: "cryptomb",
			ConfigType: &tlsv3.PrivateKeyProvider_TypedConfig{TypedConfig: &anypb.Any{
				TypeUrl: "type.googleapis.com/envoy.extensions.private_key_providers.cryptomb.v3alpha.CryptoMbPrivateKeyMethodConfig",
				Value:   keyPEM}}}}}}}
	cluster := func(name string, tls *tlsv3.UpstreamTlsContext) model.Resource {
		return model.Resource{Name: name, Resource: mustAny(&clusterv3.Cluster{Name: name, TransportSocket: &corev3.TransportSocket{
			Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(tls)}}})}
	}
	return map[string]model.Resources{
		SecretType: {
			{Name: "kubernetes://gw-cert", Resource: mustAny(&tlsv3.Secret{Name: "kubernetes://gw-cert",
				Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: tlsCert(certPEM, keyPEM)}})},
			{Name: "generic", Resource: mustAny(&tlsv3.Secret{Name: "generic",
				Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{Secret: inlineBytes(genericSecret)}}})},
			{Name: "tickets", Resource: mustAny(&tlsv3.Secret{Name: "tickets",
				Type: &tlsv3.Secret_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
					Keys: []*corev3.DataSource{inlineBytes(ticketKey)}}}})},
		},
		ListenerType: {{Name: "gateway", Resource: mustAny(listener)}},
		ClusterType:  {cluster("upstream", upstream), cluster("provider", provider)},
	}
}

func keyMaterialGenerators(resources map[string]model.Resources) map[string]Generator {
	set := map[string]Generator{probeType: GeneratorFunc(func(p *model.Proxy, pc *pushcontext.PushContext, w *model.WatchedResource, req *model.PushRequest) (model.Resources, error) {
		return genProbe(p, pc, w, req), nil
	})}
	for typeURL, rs := range resources {
		set[typeURL] = GeneratorFunc(func(*model.Proxy, *pushcontext.PushContext, *model.WatchedResource, *model.PushRequest) (model.Resources, error) {
			return rs, nil
		})
	}
	return set
}

// leaks lists which of the secrets appear in body, raw or base64 encoded
// (protojson renders bytes fields as base64).
func leaks(body []byte, keyPEM []byte) []string {
	secrets := map[string][]byte{"private key": keyPEM, "session ticket key": ticketKey, "generic secret": genericSecret,
		"key password": []byte(keyPassword), "pkcs12": pkcs12Archive}
	// A key line alone is a leak too: the PEM body between its armour.
	lines := strings.Split(strings.TrimSpace(string(keyPEM)), "\n")
	secrets["private key body line"] = []byte(lines[1])
	var found []string
	for what, s := range secrets {
		for _, form := range [][]byte{s, []byte(base64.StdEncoding.EncodeToString(s))} {
			if bytes.Contains(body, form) {
				found = append(found, what)
			}
		}
	}
	return found
}

// TestConfigDumpRedactsPrivateKeys: a proxy is served Secrets, a listener
// and a cluster carrying key material; config_dump shows the certificates
// but no key, for SotW and delta, while the proxy (and a later one sharing
// the same resources) still receives the keys.
func TestConfigDumpRedactsPrivateKeys(t *testing.T) {
	certPEM, keyPEM := testcerts.SelfSigned(t, "gw.example.com")
	resources := keyMaterial(certPEM, keyPEM)
	subscriptions := []struct {
		typeURL string
		names   []string
	}{
		{ClusterType, []string{"upstream", "provider"}},
		{ListenerType, []string{"gateway"}},
		{SecretType, []string{"kubernetes://gw-cert", "generic", "tickets"}},
	}
	// subscribe returns the marshalled responses a client of that mode got.
	modes := []struct {
		name      string
		subscribe func(h *harness, client string) []byte
	}{
		{"sotw", func(h *harness, client string) []byte {
			c := h.sotw(client)
			var got []byte
			for _, s := range subscriptions {
				r := c.subscribe(s.typeURL, s.names...)
				c.ack(r, s.names...)
				got = append(got, marshal(t, r)...)
			}
			c.expectQuiet("after subscribing")
			return got
		}},
		{"delta", func(h *harness, client string) []byte {
			c := h.delta(client)
			var got []byte
			for _, s := range subscriptions {
				c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: s.typeURL, ResourceNamesSubscribe: s.names})
				r := c.expect(s.typeURL)
				c.ack(r)
				got = append(got, marshal(t, r)...)
			}
			c.expectQuiet("after subscribing")
			return got
		}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{generators: keyMaterialGenerators(resources)})
			srv := httptest.NewServer(h.server.DebugHandler())
			defer srv.Close()

			sent := mode.subscribe(h, "gateway")
			if !bytes.Contains(sent, keyPEM) {
				t.Fatal("the proxy did not receive its private key")
			}
			for _, format := range []struct {
				query string
				into  any
			}{{"", &adminv3.ConfigDump{}}, {"&format=meshpilot", &ConfigDump{}}} {
				path := "/debug/config_dump?proxyID=" + url.QueryEscape(proxyID("gateway")) + format.query
				body := []byte(getJSON(t, srv, path, http.StatusOK, nil))
				if m, ok := format.into.(proto.Message); ok {
					// As istioctl reads a dump: extensions it does not
					// know are accepted as opaque.
					if err := (protojson.UnmarshalOptions{Resolver: lenientResolver{}}).Unmarshal(body, m); err != nil {
						t.Fatalf("%s: not an Envoy ConfigDump: %v", path, err)
					}
				} else if err := json.Unmarshal(body, format.into); err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if found := leaks(body, keyPEM); len(found) > 0 {
					t.Errorf("%s shows the %v:\n%s", path, found, body)
				}
				if !bytes.Contains(body, []byte(base64.StdEncoding.EncodeToString(certPEM))) || !bytes.Contains(body, []byte(redacted)) {
					t.Errorf("%s lost the certificate or the redaction marker:\n%s", path, body)
				}
				var compact bytes.Buffer
				if err := json.Compact(&compact, body); err != nil {
					t.Fatal(err)
				}
				for _, typeURL := range []string{ClusterType, ListenerType, SecretType} {
					if !bytes.Contains(compact.Bytes(), []byte(`"@type":"`+typeURL+`"`)) {
						t.Errorf("%s does not render the %s resources:\n%s", path, shortType(typeURL), body)
					}
				}
			}
			// Redaction works on copies: the resources being served keep their keys.
			if again := mode.subscribe(h, "later"); !bytes.Contains(again, keyPEM) {
				t.Fatal("after a config_dump, a proxy no longer receives its private key")
			}
		})
	}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSynczRedactsPrivateKeysInNacks: a NACK message quoting the rejected
// Secret, as Envoy's validation errors do, is shown in /debug/syncz without
// the key.
func TestSynczRedactsPrivateKeysInNacks(t *testing.T) {
	certPEM, keyPEM := testcerts.SelfSigned(t, "gw.example.com")
	h := newHarness(t, harnessConfig{generators: keyMaterialGenerators(keyMaterial(certPEM, keyPEM))})
	srv := httptest.NewServer(h.server.DebugHandler())
	defer srv.Close()

	c := h.sotw("gateway")
	sds := c.subscribe(SecretType, "kubernetes://gw-cert")
	quoted, err := prototext.Marshal(&tlsv3.Secret{Name: "kubernetes://gw-cert",
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: tlsCert(certPEM, keyPEM)}})
	if err != nil {
		t.Fatal(err)
	}
	c.send(&discoveryv3.DiscoveryRequest{TypeUrl: SecretType, ResponseNonce: sds.GetNonce(),
		ResourceNames: []string{"kubernetes://gw-cert"},
		ErrorDetail:   &status.Status{Code: 3, Message: "Proto constraint validation failed: " + string(quoted)}})
	c.expectQuiet("after a NACK")

	body := []byte(getJSON(t, srv, "/debug/syncz", http.StatusOK, &[]SyncStatus{}))
	if found := leaks(body, keyPEM); len(found) > 0 {
		t.Errorf("syncz shows the %v:\n%s", found, body)
	}
	if !bytes.Contains(body, []byte("Proto constraint validation failed")) || !bytes.Contains(body, []byte(redacted)) {
		t.Errorf("syncz lost the NACK's reason or the redaction marker:\n%s", body)
	}
}

func TestRedactText(t *testing.T) {
	_, keyPEM := testcerts.SelfSigned(t, "gw.example.com")
	key := string(keyPEM)
	escaped := strings.ReplaceAll(key, "\n", `\n`) // as in a quoted string
	cases := []struct {
		name, in, want string
	}{
		{"no secret", "cluster a: bad load balancer", "cluster a: bad load balancer"},
		// The key's own trailing newline stays with the text after it.
		{"PEM key", "bad key " + key + " rest", "bad key " + redacted + "\n rest"},
		{"PEM key cut short", "bad key " + key[:60], "bad key " + redacted},
		{"text private_key", `tls_certificate { private_key { inline_bytes: "` + escaped + `" } }`,
			`tls_certificate { private_key { ` + redacted + ` } }`},
		{"text session ticket keys", `session_ticket_keys { keys { inline_bytes: "abc" } keys { inline_bytes: "def" } } name: "x"`,
			`session_ticket_keys { ` + redacted + ` } name: "x"`},
		{"JSON generic secret", `{"genericSecret": {"secret": {"inlineBytes": "R0VORVJJQw=="}}}`,
			`{genericSecret { ` + redacted + ` }}`},
		{"a certificate stays", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
			"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := redactText(tc.in)
			if got != tc.want {
				t.Fatalf("redactText(%q)\n = %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestRedactedCopyLeavesTheOriginal: redaction decodes a copy; the shared Any
// that proxies are served keeps every byte.
func TestRedactedCopyLeavesTheOriginal(t *testing.T) {
	certPEM, keyPEM := testcerts.SelfSigned(t, "gw.example.com")
	for typeURL, rs := range keyMaterial(certPEM, keyPEM) {
		for _, r := range rs {
			t.Run(shortType(typeURL)+"/"+r.Name, func(t *testing.T) {
				before := proto.Clone(r.Resource)
				red, err := redactedCopy(r.Resource)
				if err != nil {
					t.Fatal(err)
				}
				if !proto.Equal(before, r.Resource) {
					t.Fatal("redaction modified the served resource")
				}
				// Both encodings: a nested Any shows as JSON only after
				// decoding. JSON fails for a nested type this binary cannot
				// resolve; its wire bytes are checked all the same.
				b, _ := protojson.Marshal(red)
				if found := leaks(append(b, red.GetValue()...), keyPEM); len(found) > 0 {
					t.Errorf("redacted copy keeps the %v: %s", found, b)
				}
			})
		}
	}
}

// TestSynczBoundsNackMessages: a NACK's message is the client's to choose,
// up to a request's 4 MiB, and it is kept for the stream's life and shown
// in every /debug/syncz answer. A long one is cut to maxNackDetail, saying
// how long it was, after redaction, so that a key past the cut, or cut in
// half by it, is still hidden.
func TestSynczBoundsNackMessages(t *testing.T) {
	certPEM, keyPEM := testcerts.SelfSigned(t, "gw.example.com")
	inline := `"privateKey": {"inlineBytes": "` + base64.StdEncoding.EncodeToString(keyPEM) + `"}`
	padding := strings.Repeat("cluster outbound|80||a.example: bad config; ", 1<<11) // about 88 KiB, 22 times the cut
	cases := []struct {
		name, message string
		wantWhole     bool
	}{
		{"short message kept whole", "cluster a: bad load balancer", true},
		{"long message", padding, false},
		// The key's JSON form starts before the cut and ends after it.
		{"key across the cut", strings.Repeat("x", maxNackDetail-40) + inline + padding, false},
		{"key past the cut", padding + string(keyPEM), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{generators: keyMaterialGenerators(keyMaterial(certPEM, keyPEM))})
			srv := httptest.NewServer(h.server.DebugHandler())
			defer srv.Close()
			c := h.sotw("gateway")
			sds := c.subscribe(SecretType, "kubernetes://gw-cert")
			c.send(&discoveryv3.DiscoveryRequest{TypeUrl: SecretType, ResponseNonce: sds.GetNonce(),
				ResourceNames: []string{"kubernetes://gw-cert"},
				ErrorDetail:   &status.Status{Code: 3, Message: tc.message}})
			c.expectQuiet("after a NACK")

			var statuses []SyncStatus
			body := getJSON(t, srv, "/debug/syncz", http.StatusOK, &statuses)
			if found := leaks([]byte(body), keyPEM); len(found) > 0 {
				t.Errorf("syncz shows the %v", found)
			}
			// What a cut would leave of the key's JSON form.
			if head := base64.StdEncoding.EncodeToString(keyPEM)[:60]; strings.Contains(body, head) {
				t.Errorf("syncz shows the start of the private key")
			}
			if len(statuses) != 1 || statuses[0].Resources[SecretType].LastError == "" {
				t.Fatalf("syncz has no NACK for SDS:\n%.2000s", body)
			}
			got := statuses[0].Resources[SecretType].LastError
			if tc.wantWhole {
				if got != tc.message {
					t.Errorf("lastError = %q, want the message whole", got)
				}
				return
			}
			if len(got) > maxNackDetail+64 {
				t.Errorf("lastError is %d bytes, want about %d at most", len(got), maxNackDetail)
			}
			if !strings.Contains(got, "bytes in all)") {
				t.Errorf("lastError does not say it was cut: %.200q", got[max(0, len(got)-200):])
			}
			if len(body) > 4*maxNackDetail+4096 {
				t.Errorf("/debug/syncz is %d bytes for one connection with one NACK", len(body))
			}
		})
	}
}

// BenchmarkNackDetail: what the server spends on a NACK whose message is
// as long as a request may be (a client's choice), against a short one.
func BenchmarkNackDetail(b *testing.B) {
	for _, size := range []int{100, 4 << 20} {
		msg := strings.Repeat("cluster outbound|80||a.example: bad config; ", size/44+1)[:size]
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			for b.Loop() {
				if got := nackDetail(msg); len(got) > maxNackDetail+64 {
					b.Fatalf("kept %d bytes", len(got))
				}
			}
		})
	}
}
