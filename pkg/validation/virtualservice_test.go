package validation

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

func parseVirtualService(t *testing.T, spec string) *networking.VirtualService {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	vs := &networking.VirtualService{}
	if err := vs.UnmarshalJSON(js); err != nil {
		t.Fatalf("bad test spec: %v", err)
	}
	return vs
}

func TestValidateVirtualService(t *testing.T) {
	cases := []struct {
		name   string
		vsName string // defaults to "vs"
		spec   string
		// want lists a substring of each expected problem, in order; nil
		// means the VirtualService is valid.
		want []string
	}{
		{
			name: "quick start: all calls to subset v2",
			spec: `
hosts: [echo.demo.svc.cluster.local]
http:
- route:
  - destination: {host: echo.demo.svc.cluster.local, subset: v2}`,
		},
		{
			// As in Istio, a subset name may have capitals.
			name: "subset with capitals",
			spec: `
hosts: [reviews]
http:
- route:
  - destination: {host: reviews, subset: V1}`,
		},
		{
			name: "short, wildcard and IP hosts, weighted split with ports",
			spec: `
hosts: [reviews, "*.example.com", 10.0.0.7, "fd00::1"]
exportTo: ["."]
http:
- name: canary
  match:
  - uri: {prefix: /api}
    method: {exact: GET}
    authority: {regex: "^reviews(:[0-9]+)?$"}
    headers: {x-user: {exact: jason}, x-present: {}}
    withoutHeaders: {x-debug: {prefix: "1"}}
    queryParams: {v: {regex: "[0-9]+"}}
    port: 9080
    sourceLabels: {app: productpage}
    sourceNamespace: default
    gateways: [mesh]
  route:
  - destination: {host: reviews, subset: v1, port: {number: 9080}}
    weight: 90
  - destination: {host: reviews, subset: v2}
    weight: 10
    headers: {request: {set: {x-canary: "yes"}}, response: {remove: [x-internal]}}
  timeout: 10s
  retries: {attempts: 3, perTryTimeout: 2s, retryOn: "5xx,connect-failure,503"}
  headers:
    request: {add: {x-start: "%START_TIME%"}, set: {":authority": reviews.internal}}
  corsPolicy:
    allowOrigins: [{exact: "https://example.com"}]
    allowMethods: [GET, POST]
    allowHeaders: ["*", x-token]
    maxAge: 24h
  mirror: {host: reviews-shadow}
  mirrorPercentage: {value: 5.5}
- route:
  - destination: {host: reviews}`,
		},
		{
			name: "redirect, direct response and rewrite routes",
			spec: `
hosts: [a]
http:
- match: [{uri: {exact: /old}}]
  redirect: {uri: /new, redirectCode: 308, scheme: https, port: 8443}
- match: [{uri: {exact: /health}}]
  directResponse: {status: 204}
- rewrite: {uriRegexRewrite: {match: "^/v1/(.*)$", rewrite: /v2/\1}}
  fault: {abort: {httpStatus: 503, percentage: {value: 1}}, delay: {fixedDelay: 5ms, percentage: {value: 10}}}
  route: [{destination: {host: a}}]`,
		},
		{
			name: "tcp and tls routes",
			spec: `
hosts: ["*.example.com", db]
tls:
- match: [{sniHosts: [login.example.com], port: 443, destinationSubnets: [10.0.0.0/8]}]
  route: [{destination: {host: login}}]
tcp:
- match: [{port: 5432, sourceSubnet: 192.168.0.1, destinationSubnets: ["10.1.0.0/16"]}]
  route: [{destination: {host: db, port: {number: 5432}}, weight: 100}]`,
		},
		{
			name: "gateway-bound star host",
			spec: `
hosts: ["*"]
gateways: [istio-system/ingress]
http: [{route: [{destination: {host: a}}]}]`,
		},
		{
			name: "no hosts, no routes",
			spec: `gateways: [mesh]`,
			want: []string{
				"spec.hosts: at least one host is required",
				"spec: at least one http, tcp or tls route is required",
			},
		},
		{
			name:   "bad object name",
			vsName: "Bad_Name",
			spec:   `{hosts: [a], http: [{route: [{destination: {host: a}}]}]}`,
			want:   []string{"metadata.name"},
		},
		{
			name: "hosts: star on the mesh, bad names, overlap",
			spec: `
hosts: ["*", "foo.*.com", "Bad_Host"]
http: [{route: [{destination: {host: a}}]}]`,
			want: []string{
				`spec.hosts[0]: "*" is not allowed for a VirtualService that applies to the mesh`,
				"spec.hosts[1]: a wildcard is only allowed",
				`spec.hosts[2]: label "Bad_Host"`,
			},
		},
		{
			name: "overlapping hosts",
			spec: `
hosts: ["*.com", a.example.com, "*.example.com", a.example.com]
http: [{route: [{destination: {host: a}}]}]`,
			want: []string{
				`spec.hosts[1]: "a.example.com" overlaps "*.com" (hosts[0])`,
				`spec.hosts[2]: "*.example.com" overlaps "*.com" (hosts[0])`,
				`spec.hosts[3]: "a.example.com" overlaps "*.com" (hosts[0])`,
				`spec.hosts[2]: "*.example.com" overlaps "a.example.com" (hosts[1])`,
				`spec.hosts[3]: "a.example.com" overlaps "a.example.com" (hosts[1])`,
				`spec.hosts[3]: "a.example.com" overlaps "*.example.com" (hosts[2])`,
			},
		},
		{
			name: "gateway names",
			spec: `
hosts: [a]
gateways: [mesh, ns/gw, gw.ns.svc.cluster.local, /gw, "ns/Bad_Gw", "a b", "*.ns", 10.0.0.1, gw.10]
http: [{route: [{destination: {host: a}}]}]`,
			want: []string{
				`spec.gateways[3]: namespace and name of "/gw" must both be set`,
				`spec.gateways[4]: name "Bad_Gw"`,
				`spec.gateways[5]: label "a b"`,
				`spec.gateways[6]: "*.ns": a gateway is named, not matched by a wildcard`,
				`spec.gateways[7]: "10.0.0.1": a gateway is named, not an IP address`,
				`spec.gateways[8]: the last label "10" is all digits`,
			},
		},
		{
			name: "exportTo",
			spec: `{hosts: [a], exportTo: ["~", "."], http: [{route: [{destination: {host: a}}]}]}`,
			want: []string{`spec.exportTo: "~" (no namespace) is allowed only for services`},
		},
		{
			name: "http route without an action",
			spec: `{hosts: [a], http: [{match: [{uri: {prefix: /}}]}]}`,
			want: []string{"spec.http[0]: one of route, redirect, directResponse or delegate is required"},
		},
		{
			name: "route, redirect and direct response together",
			spec: `
hosts: [a]
http:
- route: [{destination: {host: a}}]
  redirect: {uri: /x}
  directResponse: {status: 200}
  rewrite: {uri: /y}
  fault: {abort: {httpStatus: 500}}`,
			want: []string{
				"spec.http[0]: route and redirect and directResponse are mutually exclusive",
				"spec.http[0].rewrite: cannot be combined with redirect",
				"spec.http[0].fault: cannot be combined with redirect",
				"spec.http[0].rewrite: cannot be combined with directResponse",
				"spec.http[0].fault: cannot be combined with directResponse",
			},
		},
		{
			name: "delegation alone",
			spec: `{hosts: [a], http: [{delegate: {name: b, namespace: c}}, {delegate: {name: d}}]}`,
		},
		{
			name: "delegation with another action, or without a valid name",
			spec: `
hosts: [a]
http:
- delegate: {name: b}
  route: [{destination: {host: a}}]
- delegate: {namespace: Bad_NS}
- delegate: {name: "B_b"}`,
			want: []string{
				"spec.http[0]: route and delegate are mutually exclusive",
				"spec.http[1].delegate.name: is required",
				"spec.http[1].delegate.namespace: a lowercase RFC 1123 label",
				"spec.http[2].delegate.name: a lowercase RFC 1123 subdomain",
			},
		},
		{
			name: "destinations: missing, bad host, subset, port, weights",
			spec: `
hosts: [a]
http:
- route:
  - weight: 10
  - destination: {host: "*", subset: V_2, port: {number: 70000}}
    weight: -1
  - destination: {subset: v1}
tcp:
- route:
  - destination: {host: a}
  - destination: {host: b}`,
			want: []string{
				"spec.http[0].route[0].destination: is required",
				`spec.http[0].route[1].destination.host: "*" is not a destination`,
				`spec.http[0].route[1].destination.subset: "V_2" is not a DNS label`,
				"spec.http[0].route[1].destination.port.number: port number must be in 1..65535, got 70000",
				"spec.http[0].route[1].weight: must not be negative, got -1",
				"spec.http[0].route[2].destination.host: is required",
				"spec.tcp[0].route: the weights of 2 destinations add up to 0",
			},
		},
		{
			// Istio routes to a destination by name: it refuses a host
			// that is an IP address, or any name of two or more labels
			// whose last is all digits, wherever a route sends traffic.
			name: "destinations that are IP addresses",
			spec: `
hosts: [a, 10.0.0.7]
http:
- route: [{destination: {host: 10.0.0.1}}]
  mirror: {host: 10.0.0.2}
- route: [{destination: {host: "fd00::1"}}]
  mirrors: [{destination: {host: 10.0.0.3}}]
- route: [{destination: {host: svc.123}}]
- route: [{destination: {host: "*.10"}}]
tls:
- match: [{sniHosts: [10.0.0.7]}]
  route: [{destination: {host: 10.0.0.4}}]
tcp:
- route: [{destination: {host: 10.0.0.5, port: {number: 5432}}}]`,
			want: []string{
				`spec.http[0].route[0].destination.host: "10.0.0.1" is an IP address`,
				`spec.http[0].mirror.host: "10.0.0.2" is an IP address`,
				`spec.http[1].route[0].destination.host: "fd00::1" is an IP address`,
				`spec.http[1].mirrors[0].destination.host: "10.0.0.3" is an IP address`,
				`spec.http[2].route[0].destination.host: the last label "123" is all digits`,
				`spec.http[3].route[0].destination.host: the last label "10" is all digits`,
				`spec.tls[0].route[0].destination.host: "10.0.0.4" is an IP address`,
				`spec.tcp[0].route[0].destination.host: "10.0.0.5" is an IP address`,
			},
		},
		{
			// The same names are no hosts nor SNI names either: only an
			// address itself may be one.
			name: "hosts and SNI names whose last label is all digits",
			spec: `
hosts: [a.123, "*.10", b]
tls:
- match: [{sniHosts: [b.456]}]
  route: [{destination: {host: db}}]`,
			want: []string{
				`spec.hosts[0]: the last label "123" is all digits`,
				`spec.hosts[1]: the last label "10" is all digits`,
				`spec.tls[0].match[0].sniHosts[0]: the last label "456" is all digits`,
			},
		},
		{
			// What Istio admits beside: hosts and SNI names may be
			// addresses, and a destination may be a short name (digits
			// alone too, a name of one label), a qualified name with
			// digits anywhere but the whole last label, or a wildcard.
			name: "destination names Istio admits",
			spec: `
hosts: [10.0.0.7, "*.example.com"]
http:
- route: [{destination: {host: reviews}}]
  mirror: {host: shadow.ns}
- route: [{destination: {host: "10"}}]
  mirrors: [{destination: {host: "*.example.com"}}]
- route: [{destination: {host: 10.example.com}}]
- route: [{destination: {host: svc.ns2.svc.cluster.local}}]
- route: [{destination: {host: svc.v2}}]
- route: [{destination: {host: "*.example.com"}}]
tls:
- match: [{sniHosts: [10.0.0.7]}]
  route: [{destination: {host: db.example.com}}]
tcp:
- route: [{destination: {host: db}}]`,
		},
		{
			name: "matches: regexes, header names, port, labels, namespace",
			spec: `
hosts: [a]
http:
- match:
  - uri: {regex: "(unclosed"}
    scheme: {regex: ""}
    headers: {"bad header": {exact: x}, ":authority": {exact: a}}
    withoutHeaders: {x-ok: {regex: "a{2,1}"}}
    queryParams: {q: {regex: "[z-a]"}}
    port: 70000
    sourceLabels: {"": x}
    sourceNamespace: Bad_NS
  route: [{destination: {host: a}}]`,
			want: []string{
				"spec.http[0].match[0].uri.regex: not an RE2 regular expression",
				"spec.http[0].match[0].scheme.regex: must not be empty",
				`spec.http[0].match[0].headers[bad header]: "bad header" is not a valid HTTP header name`,
				"spec.http[0].match[0].withoutHeaders[x-ok].regex: not an RE2 regular expression",
				"spec.http[0].match[0].queryParams[q].regex: not an RE2 regular expression",
				"spec.http[0].match[0].port: port number must be in 1..65535, got 70000",
				"spec.http[0].match[0].sourceLabels: empty label key",
				"spec.http[0].match[0].sourceNamespace: a lowercase RFC 1123 label",
			},
		},
		{
			name: "regex too long",
			spec: "{hosts: [a], http: [{match: [{uri: {regex: \"" + strings.Repeat("a", 1025) + "\"}}], route: [{destination: {host: a}}]}]}",
			want: []string{"spec.http[0].match[0].uri.regex: longer than 1024 characters"},
		},
		{
			name: "JWT claim routing on the mesh",
			spec: `
hosts: [a]
http:
- match: [{headers: {"@request.auth.claims.group": {exact: admin}}}]
  route: [{destination: {host: a}}]`,
			want: []string{"spec.http[0].match[0].headers[@request.auth.claims.group]: JWT claim routing works only on gateways"},
		},
		{
			name: "JWT claim routing on a gateway",
			spec: `
hosts: [a.example.com]
gateways: [istio-system/ingress]
http:
- match: [{headers: {"@request.auth.claims.group": {exact: admin}}}]
  route: [{destination: {host: a}}]`,
		},
		{
			name: "durations and retries",
			spec: `
hosts: [a]
http:
- route: [{destination: {host: a}}]
  timeout: 0.0001s
  retries: {attempts: -1, perTryTimeout: 0s, backoff: 0.0005s, retryOn: "5xx,sometimes,999"}
- route: [{destination: {host: a}}]
  retries: {attempts: 0, retryOn: 5xx}
  timeout: 1.0005s`,
			want: []string{
				"spec.http[0].timeout: duration must be at least 1ms",
				"spec.http[0].retries.attempts: must not be negative",
				"spec.http[0].retries.perTryTimeout: duration must be at least 1ms",
				"spec.http[0].retries.backoff: duration must be at least 1ms",
				`spec.http[0].retries.retryOn: "sometimes" is neither a retry condition nor an HTTP status code`,
				`spec.http[0].retries.retryOn: "999" is neither`,
				"spec.http[1].timeout: must be whole milliseconds, got 1.0005s",
				"spec.http[1].retries: attempts is 0 (retries disabled)",
			},
		},
		{
			name: "redirect and direct response details",
			spec: `
hosts: [a]
http:
- redirect: {redirectCode: 200}
- redirect: {uri: /a, prefixRewrite: /b, scheme: ftp, port: 0}
- directResponse: {status: 700}
- directResponse: {status: 200, body: {string: ok}}`,
			want: []string{
				"spec.http[0].redirect: must set at least one of uri",
				"spec.http[0].redirect.redirectCode: must be a 3xx status, got 200",
				"spec.http[1].redirect: uri and prefixRewrite are mutually exclusive",
				`spec.http[1].redirect.scheme: must be "http" or "https", got "ftp"`,
				"spec.http[1].redirect.port: port number must be in 1..65535, got 0",
				"spec.http[2].directResponse.status: must be an HTTP status in 200..599, got 700",
			},
		},
		{
			name: "direct response body too large",
			spec: "{hosts: [a], http: [{directResponse: {status: 200, body: {string: \"" + strings.Repeat("x", 1<<20+1) + "\"}}}]}",
			want: []string{"spec.http[0].directResponse.body: must be at most 1 MiB"},
		},
		{
			name: "rewrite",
			spec: `
hosts: [a]
http:
- rewrite: {}
  route: [{destination: {host: a}}]
- rewrite: {uri: /x, uriRegexRewrite: {match: "(", rewrite: ""}}
  route: [{destination: {host: a}}]`,
			want: []string{
				"spec.http[0].rewrite: must set uri, uriRegexRewrite or authority",
				"spec.http[1].rewrite: uri and uriRegexRewrite are mutually exclusive",
				"spec.http[1].rewrite.uriRegexRewrite.rewrite: is required",
				"spec.http[1].rewrite.uriRegexRewrite.match: not an RE2 regular expression",
			},
		},
		{
			name: "authority set twice",
			spec: `
hosts: [a]
http:
- rewrite: {authority: b}
  headers: {request: {set: {host: c}}}
  route: [{destination: {host: a}}]`,
			want: []string{`spec.http[0].headers.request: "host" is set while rewrite.authority also sets the authority`},
		},
		{
			name: "header operations",
			spec: `
hosts: [a]
http:
- headers:
    request: {set: {":path": /x}, add: {x-pct: "100%"}, remove: [host]}
    response: {set: {":authority": b, "": v}, add: {x-ctl: "a\u0001b"}}
  route:
  - destination: {host: a}
    headers: {response: {remove: [":status"]}}`,
			want: []string{
				`spec.http[0].headers.request.set[:path]: pseudo-header ":path" cannot be changed`,
				"spec.http[0].headers.request.add[x-pct]: a single % is not allowed",
				"spec.http[0].headers.request.remove[0]: the Host header cannot be changed here",
				"spec.http[0].headers.response.set[]: header name must not be empty",
				`spec.http[0].headers.response.set[:authority]: pseudo-header ":authority" cannot be changed`,
				"spec.http[0].headers.response.add[x-ctl]: control characters are not allowed",
				`spec.http[0].route[0].headers.response.remove[0]: pseudo-header ":status" cannot be changed`,
			},
		},
		{
			name: "fault injection",
			spec: `
hosts: [a]
http:
- fault: {}
  route: [{destination: {host: a}}]
- fault:
    delay: {percentage: {value: 101}, exponentialDelay: 1s}
    abort: {percentage: {value: -1}, grpcStatus: MAYBE}
  route: [{destination: {host: a}}]
- fault: {delay: {percent: 10}, abort: {http2Error: x}}
  route: [{destination: {host: a}}]
- fault: {abort: {httpStatus: 100}}
  route: [{destination: {host: a}}]`,
			want: []string{
				"spec.http[0].fault: must set abort, delay or both",
				"spec.http[1].fault.delay.percentage.value: must be between 0 and 100, got 101",
				"spec.http[1].fault.delay.exponentialDelay: is not supported",
				"spec.http[1].fault.abort.percentage.value: must be between 0 and 100, got -1",
				`spec.http[1].fault.abort.grpcStatus: "MAYBE" is not a gRPC status name`,
				"spec.http[2].fault.delay.fixedDelay: is required",
				"spec.http[2].fault.abort.http2Error: is not supported",
				"spec.http[3].fault.abort.httpStatus: must be an HTTP status in 200..599, got 100",
			},
		},
		{
			name: "mirrors and cors",
			spec: `
hosts: [a]
http:
- route: [{destination: {host: a}}]
  mirror: {host: ""}
  mirrorPercent: 150
  mirrorPercentage: {value: 100.5}
  mirrors: [{percentage: {value: 50}}, {destination: {host: b, subset: "x.y"}}]
  corsPolicy:
    allowOrigins: [{exact: ""}, {regex: "("}]
    allowMethods: [GET, FETCH]
    exposeHeaders: ["bad name"]
    maxAge: 1.5s`,
			want: []string{
				"spec.http[0].corsPolicy.allowOrigins[0]: must set a non-empty exact, prefix or regex",
				"spec.http[0].corsPolicy.allowOrigins[1].regex: not an RE2 regular expression",
				`spec.http[0].corsPolicy.allowMethods[1]: "FETCH" is not an HTTP method`,
				`spec.http[0].corsPolicy.exposeHeaders[0]: "bad name" is not a valid HTTP header name`,
				"spec.http[0].corsPolicy.maxAge: must be whole seconds",
				"spec.http[0].mirror.host: is required",
				"spec.http[0].mirrorPercent: must be at most 100, got 150",
				"spec.http[0].mirrorPercentage.value: must be between 0 and 100, got 100.5",
				"spec.http[0].mirrors[0].destination: is required",
				`spec.http[0].mirrors[1].destination.subset: "x.y" is not a DNS label`,
			},
		},
		{
			name: "tls routes",
			spec: `
hosts: ["*.example.com"]
tls:
- route: [{destination: {host: a}}]
- match: [{port: 443}, {sniHosts: [other.org, "*.a.example.com", "bad..name"], destinationSubnets: [10.0.0.0/33, x]}]`,
			want: []string{
				"spec.tls[0].match: at least one match is required",
				"spec.tls[1].match[0].sniHosts: at least one SNI host is required",
				`spec.tls[1].match[1].sniHosts[0]: "other.org" is not within any of the hosts [*.example.com]`,
				"spec.tls[1].match[1].sniHosts[2]: label",
				`spec.tls[1].match[1].destinationSubnets[0]: "10.0.0.0/33" is neither an IP address nor a CIDR block`,
				`spec.tls[1].match[1].destinationSubnets[1]: "x" is neither`,
				"spec.tls[1].route: at least one destination is required",
			},
		},
		{
			name: "tcp routes",
			spec: `
hosts: [db]
tcp:
- match: [{sourceSubnet: "300.1.1.1", port: 70000, gateways: ["a/"], sourceLabels: {app: "x*"}}]`,
			want: []string{
				`spec.tcp[0].match[0].sourceSubnet: "300.1.1.1" is neither`,
				"spec.tcp[0].match[0].port: port number must be in 1..65535",
				`spec.tcp[0].match[0].sourceLabels: value of "app": wildcards are not supported`,
				`spec.tcp[0].match[0].gateways[0]: namespace and name of "a/" must both be set`,
				"spec.tcp[0].route: at least one destination is required",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.vsName
			if name == "" {
				name = "vs"
			}
			got := problemsOf(ValidateVirtualService(name, "ns", parseVirtualService(t, tc.spec)))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

// Every problem names its field, so the webhook and the sources can point
// at it.
func TestValidateVirtualServiceProblemsAreFieldErrors(t *testing.T) {
	vs := parseVirtualService(t, `{hosts: ["*"], http: [{route: [{destination: {host: "", subset: "A_"}}]}]}`)
	err := ValidateVirtualService("vs", "ns", vs)
	fes := FieldErrors(err)
	if len(fes) != 3 {
		t.Fatalf("got field errors %v from %v, want 3", fes, err)
	}
	for _, fe := range fes {
		if !strings.HasPrefix(fe.Path, "spec.") {
			t.Errorf("path %q does not start at spec", fe.Path)
		}
	}
}

func TestValidateVirtualServiceNilSpec(t *testing.T) {
	if err := ValidateVirtualService("a", "b", nil); err == nil || !strings.Contains(err.Error(), "spec: is required") {
		t.Fatalf("got %v, want a missing-spec error", err)
	}
}

func TestValidateVirtualServiceDoesNotMutate(t *testing.T) {
	vs := parseVirtualService(t, `{hosts: [a], http: [{route: [{destination: {host: a, subset: v1}, weight: 0}, {destination: {host: a}}]}]}`)
	before := vs.String()
	_ = ValidateVirtualService("a", "b", vs)
	if vs.String() != before {
		t.Fatalf("spec changed: %s -> %s", before, vs.String())
	}
}

func TestHostsOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"a.com", "a.com", true},
		{"a.com", "b.com", false},
		{"*.a.com", "x.a.com", true},
		{"*.a.com", "a.com", false},
		{"*.com", "*.a.com", true},
		{"*.a.com", "*.b.com", false},
		{"*", "anything", true},
		{"*.a.com", "xa.com", false},
	} {
		if got := hostsOverlap(tc.a, tc.b); got != tc.want {
			t.Errorf("hostsOverlap(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := hostsOverlap(tc.b, tc.a); got != tc.want {
			t.Errorf("hostsOverlap(%q, %q) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

// The strict field check knows the VirtualService spec: misspelt fields,
// values of the wrong type, unknown enum names and two members of a oneof
// are refused by path before the validator sees the spec.
func TestCheckFieldsVirtualService(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec string
		want []string
	}{{
		name: "valid",
		spec: `{hosts: [a], http: [{match: [{uri: {prefix: /}}], route: [{destination: {host: a, subset: v2}, weight: 100}], timeout: 5s}]}`,
	}, {
		name: "problems",
		spec: `
hosts: a
http:
- route: [{destination: {host: a, subest: v2}, weight: "heavy"}]
  timeout: soon
  redirect: {port: 80, derivePort: FROM_SOMEWHERE}
  match: [{uri: {exact: /a, prefix: /b}}]`,
		want: []string{
			"spec.hosts: want a list",
			`spec.http[0].match[0].uri: exact and prefix are mutually exclusive`,
			`spec.http[0].redirect.derivePort: want FROM_PROTOCOL_DEFAULT or FROM_REQUEST_PORT, got "FROM_SOMEWHERE"`,
			`spec.http[0].redirect: derivePort and port are mutually exclusive`,
			"spec.http[0].route[0].destination.subest: unknown field (did you mean subset?)",
			`spec.http[0].route[0].weight: want an integer, got "heavy"`,
			`spec.http[0].timeout: want a duration`,
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldMessages(CheckFields(VirtualServiceSpec, specOf(t, tc.spec), "spec"))
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, want := range tc.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}
