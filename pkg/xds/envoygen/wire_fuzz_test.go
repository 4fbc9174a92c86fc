package envoygen

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// The hand-written encoders of this package write strings as they get
// them; proto.Marshal refuses strings that are not UTF-8. Every string
// they are given comes from a Kubernetes name or an Ingress path, which
// are UTF-8, so the fuzz targets hold them to proto.Marshal on UTF-8
// strings only.
func utf8Only(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// fuzzBytes hands out the fuzzer's bytes one decision at a time; once they
// run out every decision is zero, so any input describes a whole case.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

func (b *fuzzBytes) pick(options []string) string { return options[int(b.next())%len(options)] }

// fuzzHashPolicy is a rule's consistent-hash policy of each kind the
// route encoder splices in.
func fuzzHashPolicy(kind uint8, name string, ttl uint16) []*route.RouteAction_HashPolicy {
	var p route.RouteAction_HashPolicy
	switch kind % 5 {
	case 0:
		return nil
	case 1:
		p.PolicySpecifier = &route.RouteAction_HashPolicy_Header_{Header: &route.RouteAction_HashPolicy_Header{HeaderName: name}}
	case 2:
		p.PolicySpecifier = &route.RouteAction_HashPolicy_Cookie_{Cookie: &route.RouteAction_HashPolicy_Cookie{
			Name: name, Path: "/" + name, Ttl: durationpb.New(time.Duration(ttl) * time.Millisecond)}}
	case 3:
		p.PolicySpecifier = &route.RouteAction_HashPolicy_QueryParameter_{QueryParameter: &route.RouteAction_HashPolicy_QueryParameter{Name: name}}
	case 4:
		p.PolicySpecifier = &route.RouteAction_HashPolicy_ConnectionProperties_{ConnectionProperties: &route.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}
	}
	return []*route.RouteAction_HashPolicy{&p}
}

// FuzzVhostEncoderMatchesProto holds the service virtual host encoder to
// what it promises (route_wire.go): byte for byte deterministic
// proto.Marshal of the message, built the ordinary way in
// referenceVirtualHost, with the size it computes beforehand exact
// (encodeVhostBytes checks). A route configuration assembled from the
// encoded virtual host, as rds.go does, decodes to the configuration that
// holds the message.
func FuzzVhostEncoderMatchesProto(f *testing.F) {
	f.Add("echo.demo.svc.cluster.local", uint16(7070), "echo.demo.svc.cluster.local,echo,echo.demo.svc,echo.demo,10.96.0.10", uint8(0), "", uint16(0))
	f.Add("web.app.svc.cluster.local", uint16(80), "web.app.svc.cluster.local,[fd00::1]", uint8(1), "x-user", uint16(0))
	f.Add("web.app.svc.cluster.local", uint16(65535), "web", uint8(2), "sticky", uint16(60000))
	f.Add(strings.Repeat("a", 63)+"."+strings.Repeat("b", 63)+".svc.cluster.local", uint16(9080), strings.Repeat("c", 200), uint8(3), "q", uint16(1))
	f.Add("", uint16(0), "", uint8(4), "", uint16(0))
	f.Fuzz(func(t *testing.T, host string, port uint16, hostList string, hashKind uint8, hashName string, ttl uint16) {
		host, hashName = utf8Only(host), utf8Only(hashName)
		var hosts []string
		if hostList != "" {
			hosts = strings.Split(utf8Only(hostList), ",")
		}
		hash := fuzzHashPolicy(hashKind, hashName, ttl)
		got := encodeVhostBytes(t, host, uint32(port), hosts, hash)
		ref := referenceVirtualHost(host, uint32(port), hosts, hash)
		want, err := lrMarshal.Marshal(ref)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			decoded := &route.VirtualHost{}
			err := proto.Unmarshal(got, decoded)
			t.Fatalf("encoded virtual host differs from proto.Marshal (decodes: %v)\n got %v\nwant %v", err, decoded, ref)
		}

		name := strconv.Itoa(int(port))
		head, err := lrMarshal.Marshal(&route.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false)})
		if err != nil {
			t.Fatal(err)
		}
		var rc route.RouteConfiguration
		if err := proto.Unmarshal(appendVirtualHost(appendVirtualHost(head, got), got), &rc); err != nil {
			t.Fatalf("assembled route configuration does not decode: %v", err)
		}
		wantRC := &route.RouteConfiguration{Name: name, ValidateClusters: wrapperspb.Bool(false), VirtualHosts: []*route.VirtualHost{ref, ref}}
		if diff := cmp.Diff(wantRC, &rc, protocmp.Transform()); diff != "" {
			t.Fatalf("assembled route configuration differs (-want +got):\n%s", diff)
		}
	})
}

// FuzzGatewayVhostEncoderMatchesProto holds the Ingress virtual host
// encoder (gateway_wire.go) to proto.Marshal's bytes for the message its
// comment describes, for routes of every path kind, including paths the
// gateway must drop. The expected matches are written from the Ingress
// semantics (Exact is a path match; Prefix is path_separated_prefix
// without trailing slashes, "/" alone is a prefix match; paths that are
// not absolute or carry a query or fragment are left out).
func FuzzGatewayVhostEncoderMatchesProto(f *testing.F) {
	f.Add("web.example.com", "/healthz", "app", []byte{3, 0, 1, 0, 0, 1, 2, 1, 1, 0, 0, 0})
	f.Add("*.example.com", "/api/v1/", "web", []byte{5, 1, 5, 2, 1, 3, 0, 6, 0, 2, 1, 0, 1, 4, 2, 2, 0, 7, 1, 1})
	f.Add("", "", "", []byte{})
	f.Add("h", "noslash", "x", []byte{2, 0, 5, 2, 0, 1, 6, 0, 0})
	p := newRouteParts()
	g := newRouteGenerator(Options{})
	push := pushcontext.Build(model.NewStore(), testPushOptions(), nil, nil)
	b := gatewayRouteBuild{g: g, problems: lrProblems{logger: slog.New(slog.NewTextHandler(io.Discard, nil)), push: push}}
	f.Fuzz(func(t *testing.T, host, path, name string, spec []byte) {
		host, path, name = utf8Only(host), utf8Only(path), utf8Only(name)
		in := fuzzBytes(spec)
		paths := []string{"/", "/api", "/api/", "/a//", "//", "", "/x?y=1", "/x#f", path, path + "/"}
		hosts := []string{"web.app.svc.cluster.local", "a.b.svc.cluster.local", name}
		names := []string{"web", "app", name}
		vh := &pushcontext.IngressVirtualHost{Host: host}
		want := &route.VirtualHost{Name: host, Domains: []string{host}, IncludeRequestAttemptCount: true}
		for range int(in.next()) % 9 {
			r := &pushcontext.IngressRoute{PathType: model.PathTypePrefix, Path: in.pick(paths), Host: in.pick(hosts),
				From: model.NamespacedName{Namespace: in.pick(names), Name: in.pick(names)}}
			if in.next()%2 == 0 {
				r.PathType = model.PathTypeExact
			}
			r.Port = uint32(in.next()) << (in.next() % 9)
			r.Cluster = fmt.Sprintf("outbound|%d||%s", r.Port, r.Host)
			vh.Routes = append(vh.Routes, r)

			var match *route.RouteMatch
			switch trimmed := strings.TrimRight(r.Path, "/"); {
			case !strings.HasPrefix(r.Path, "/") || strings.ContainsAny(r.Path, "?#"):
				continue
			case r.PathType == model.PathTypeExact:
				match = &route.RouteMatch{PathSpecifier: &route.RouteMatch_Path{Path: r.Path}}
			case trimmed == "":
				match = &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
			default:
				match = &route.RouteMatch{PathSpecifier: &route.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: trimmed}}
			}
			want.Routes = append(want.Routes, &route.Route{
				Name:  r.From.Namespace + "/" + r.From.Name,
				Match: match,
				Action: &route.Route_Route{Route: &route.RouteAction{
					ClusterSpecifier:  &route.RouteAction_Cluster{Cluster: r.Cluster},
					Timeout:           p.noTimeout,
					RetryPolicy:       p.defaultRetry,
					MaxStreamDuration: p.outboundStreamMax,
				}},
				Decorator: &route.Decorator{Operation: fmt.Sprintf("%s:%d/*", r.Host, r.Port)},
			})
		}
		wantBytes, err := lrMarshal.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := b.virtualHost(vh)
		decoded := &route.VirtualHost{}
		if err := proto.Unmarshal(got, decoded); err != nil || !proto.Equal(decoded, want) {
			t.Fatalf("encoded virtual host does not decode to the message (%v)\n got %v\nwant %v", err, decoded, want)
		}
		// The encoder writes the name and domain even when empty, where
		// proto.Marshal leaves empty strings out; the translation never
		// makes an empty host ("*" stands for any), so only there may the
		// bytes differ.
		if host != "" && !bytes.Equal(got, wantBytes) {
			t.Fatalf("encoded virtual host differs from proto.Marshal\n got %x\nwant %x", got, wantBytes)
		}
	})
}

// FuzzClusterTemplateMatchesBuilder holds the spliced clusters of
// cluster_template.go to their contract: they decode to exactly the
// cluster buildOutboundCluster makes (proto.Equal; the splice relies on
// protobuf merging concatenated fields, so the bytes themselves need not
// match), for any service name and port, every protocol and proxy kind,
// with and without auto mTLS and whatever identities the servers have.
func FuzzClusterTemplateMatchesBuilder(f *testing.F) {
	f.Add("web.app.svc.cluster.local", uint16(8080), uint8(0), uint8(0), false, "")
	f.Add("echo.demo.svc.cluster.local", uint16(7070), uint8(2), uint8(0), true, "spiffe://cluster.local/ns/demo/sa/echo,spiffe://cluster.local/ns/demo/sa/echo-v2")
	f.Add(strings.Repeat("x", 300), uint16(65535), uint8(5), uint8(1), true, "")
	f.Add("", uint16(0), uint8(3), uint8(2), true, ",")
	var templates clusterTemplates
	protocols := []model.Protocol{model.ProtocolHTTP, model.ProtocolHTTP2, model.ProtocolGRPC, model.ProtocolTCP, model.ProtocolUnknown, model.ProtocolTLS}
	proxyTypes := []model.NodeType{model.SidecarProxy, model.Router, model.NodeProxy}
	f.Fuzz(func(t *testing.T, host string, port uint16, protocol, proxyType uint8, auto bool, identities string) {
		host = utf8Only(host)
		peer := peerTLS{auto: auto}
		if identities != "" {
			peer.identities = pushcontext.NewWorkloadIdentities(strings.Split(utf8Only(identities), ",")...)
		}
		o := outboundCluster{
			svc:       &model.Service{Hostname: host},
			port:      &model.Port{Port: uint32(port), Protocol: protocols[int(protocol)%len(protocols)]},
			proxyType: proxyTypes[int(proxyType)%len(proxyTypes)],
			peer:      peer,
		}
		want := buildOutboundCluster(o, problemReporter{})
		res := templates.get(o.port.Protocol, o.proxyType).resource(o)
		if res.Name != want.GetName() || res.Resource.GetTypeUrl() != ClusterType {
			t.Fatalf("resource %q of type %q, want %q", res.Name, res.Resource.GetTypeUrl(), want.GetName())
		}
		var got cluster.Cluster
		if err := proto.Unmarshal(res.Resource.GetValue(), &got); err != nil {
			t.Fatalf("spliced cluster does not decode: %v", err)
		}
		if !proto.Equal(want, &got) {
			t.Fatalf("spliced cluster differs (-built +spliced):\n%s", cmp.Diff(want, &got, protocmp.Transform()))
		}
	})
}
