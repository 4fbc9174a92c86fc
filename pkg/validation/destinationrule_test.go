package validation

import (
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"
	"istio.io/api/networking/v1alpha3"
	"istio.io/api/type/v1beta1"
	"sigs.k8s.io/yaml"
)

func parseSpec(t *testing.T, spec string) *networking.DestinationRule {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(spec))
	if err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	dr := &networking.DestinationRule{}
	if err := dr.UnmarshalJSON(js); err != nil {
		t.Fatalf("bad test spec: %v", err)
	}
	return dr
}

// problemsOf splits a joined error into its messages.
func problemsOf(err error) []string {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range joined.Unwrap() {
		out = append(out, e.Error())
	}
	return out
}

func TestValidateDestinationRule(t *testing.T) {
	cases := []struct {
		name      string
		drName    string // defaults to "dr"
		namespace string // defaults to "ns"
		spec      string
		// want lists a substring of each expected problem, in order; nil
		// means the rule is valid.
		want []string
	}{
		{name: "minimal", spec: `host: reviews`},
		{name: "fqdn", spec: `host: reviews.prod.svc.cluster.local`},
		{name: "wildcard host", spec: `host: "*.example.com"`},
		{name: "star host", spec: `host: "*"`},
		{name: "missing host", spec: `subsets: []`, want: []string{"spec.host: host is required"}},
		{name: "host with bad label", spec: `host: Reviews_x.prod`, want: []string{`spec.host: label "Reviews_x"`}},
		{name: "host with inner wildcard", spec: `host: "foo.*.com"`, want: []string{"spec.host: a wildcard is only allowed"}},
		// Istio admits capitals, a final dot and a partial wildcard in a
		// rule's host, and refuses an IP address.
		{name: "host trailing dot", spec: `host: foo.com.`},
		{name: "host with capitals", spec: `host: Reviews.Prod.svc.cluster.local`},
		{name: "host partial wildcard", spec: `host: "*-east.example.com"`},
		{name: "host partial wildcard without dash", spec: `host: "*east.example.com"`},
		{name: "host that is an address", spec: `host: 10.0.0.1`, want: []string{`spec.host: the last label "1" is all digits`}},
		{name: "host with wildcard inside first label", spec: `host: "ea*st.example.com"`, want: []string{`spec.host: label "ea*st": a wildcard is only allowed`}},
		{name: "bad object name", drName: "Bad_Name", spec: `host: a`, want: []string{"metadata.name"}},
		{name: "bad namespace", namespace: "a.b", spec: `host: a`, want: []string{"metadata.namespace"}},
		{
			name: "good subsets",
			spec: `
host: reviews
subsets:
- name: v1
  labels: {version: v1}
- name: v2
  labels: {version: v2}
  trafficPolicy:
    loadBalancer: {simple: ROUND_ROBIN}`,
		},
		{
			name: "subset problems all reported",
			spec: `
host: reviews
subsets:
- name: v1
  labels: {version: v1}
- name: v1
  labels: {version: v2}
- name: V_2
  labels: {version: v3}
- labels: {version: v4}`,
			want: []string{
				`spec.subsets[1].name: duplicate subset name "v1"`,
				`spec.subsets[2].name: "V_2" is not a DNS label: letters, digits and inner hyphens, at most 63 characters`,
				"spec.subsets[3].name: is required",
			},
		},
		{
			// Istio accepts a subset without labels: it selects every
			// endpoint of the host (and the endpoint index serves it so).
			name: "subset without labels",
			spec: `
host: reviews
subsets:
- name: all
- name: all-empty
  labels: {}
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}`,
		},
		{
			// Istio's subset names may have capitals.
			name: "subset name with capitals",
			spec: `
host: reviews
subsets:
- name: V1
  labels: {version: v1}`,
		},
		{
			name: "subset bad label value",
			spec: `
host: reviews
subsets:
- name: v1
  labels: {version: "not valid!"}`,
			want: []string{`spec.subsets[0].labels: value of "version"`},
		},
		{
			name: "consistent hash with header",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash: {httpHeaderName: x-user}`,
		},
		{
			// Istio admits it (a ring hash that hashes each request at
			// random), as it does a useSourceIp that is false.
			name: "consistent hash without key",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash: {minimumRingSize: 1024}
subsets:
- name: v1
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: false}}}`,
		},
		{
			name: "consistent hash cookie without name",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash: {httpCookie: {ttl: 10s}}`,
			want: []string{"consistentHash.httpCookie.name: is required"},
		},
		{
			name: "consistent hash empty header",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash: {httpHeaderName: ""}`,
			want: []string{"httpHeaderName: must not be empty"},
		},
		{
			name: "maglev table not prime",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash: {useSourceIp: true, maglev: {tableSize: 1000}}`,
			want: []string{"maglev.tableSize: must be a prime number"},
		},
		{
			name: "locality distribute must sum to 100",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    simple: LEAST_REQUEST
    localityLbSetting:
      distribute:
      - from: us-east/*
        to: {"us-east/*": 60, "us-west/*": 30}`,
			want: []string{"localityLbSetting.distribute[0].to: weights must sum to 100, got 90"},
		},
		{
			name: "locality distribute and failover",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: r/z
        to: {"r/z": 100}
      failover:
      - from: r
        to: r`,
			want: []string{"only one of distribute and failover", "failover[0]: from and to must differ"},
		},
		{
			name: "connection pool in range",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    tcp: {maxConnections: 100, connectTimeout: 30ms, tcpKeepalive: {time: 7200s, interval: 75s}}
    http: {http1MaxPendingRequests: 10, http2MaxRequests: 100, maxRequestsPerConnection: 1, maxRetries: 3, idleTimeout: 1h}`,
		},
		{
			// Istio documents 0s as disabling the TCP idle timeout.
			name: "tcp idle timeout disabled",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    tcp: {idleTimeout: 0s}`,
		},
		{
			name: "tcp idle timeout below 1ms",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    tcp: {idleTimeout: 0.0005s}`,
			want: []string{"tcp.idleTimeout: duration must be at least 1ms"},
		},
		{
			name: "http idle timeout 0s stays invalid",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    http: {idleTimeout: 0s}`,
			want: []string{"http.idleTimeout: duration must be at least 1ms"},
		},
		{
			name: "connection pool out of range",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    tcp: {maxConnections: -1, connectTimeout: 0s}
    http: {http1MaxPendingRequests: -2, http2MaxRequests: -3, maxRequestsPerConnection: -6, maxRetries: -4, maxConcurrentStreams: -5}`,
			want: []string{
				"tcp.maxConnections: must not be negative",
				"tcp.connectTimeout: duration must be at least 1ms",
				"http.http1MaxPendingRequests: must not be negative",
				"http.http2MaxRequests: must not be negative",
				"http.maxRetries: must not be negative",
				"http.maxConcurrentStreams: must not be negative",
				"http.maxRequestsPerConnection: must not be negative",
			},
		},
		{
			name: "empty connection pool",
			spec: `
host: a
trafficPolicy:
  connectionPool: {}`,
			want: []string{"connectionPool: must set tcp or http settings"},
		},
		{
			name: "outlier detection out of range",
			spec: `
host: a
trafficPolicy:
  outlierDetection: {consecutiveErrors: -1, interval: 0s, maxEjectionPercent: 101, minHealthPercent: -1, outlierDetectionHttpErrorCodes: [503, 42]}`,
			want: []string{
				"outlierDetection.consecutiveErrors: must not be negative",
				"outlierDetection.interval: duration must be at least",
				"outlierDetection.maxEjectionPercent: must be between 0 and 100",
				"outlierDetection.minHealthPercent: must be between 0 and 100",
				"outlierDetectionHttpErrorCodes[1]: not an HTTP status code",
			},
		},
		{
			name: "tls mutual with credential",
			spec: `
host: a
trafficPolicy:
  tls: {mode: MUTUAL, credentialName: client-creds}`,
		},
		{
			name: "tls mutual with files",
			spec: `
host: a
trafficPolicy:
  tls: {mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem, caCertificates: /ca.pem}`,
		},
		{
			name: "tls mutual without key",
			spec: `
host: a
trafficPolicy:
  tls: {mode: MUTUAL, clientCertificate: /c.pem}`,
			want: []string{"tls.privateKey: mode MUTUAL needs"},
		},
		{
			name: "tls mutual with nothing",
			spec: `
host: a
trafficPolicy:
  tls: {mode: MUTUAL}`,
			want: []string{"tls.clientCertificate: mode MUTUAL needs", "tls.privateKey: mode MUTUAL needs"},
		},
		{
			name: "tls mutual with both credential and files",
			spec: `
host: a
trafficPolicy:
  tls: {mode: MUTUAL, credentialName: c, clientCertificate: /c.pem, privateKey: /k.pem}`,
			want: []string{"mutually exclusive"},
		},
		{
			// Istio ignores them: ISTIO_MUTUAL uses the workload's own.
			name: "tls istio mutual with certs",
			spec: `
host: a
trafficPolicy:
  tls: {mode: ISTIO_MUTUAL, caCertificates: /ca.pem, credentialName: c, insecureSkipVerify: true, subjectAltNames: [b]}`,
		},
		{
			name: "tls istio mutual with sni is fine",
			spec: `
host: a
trafficPolicy:
  tls: {mode: ISTIO_MUTUAL, sni: a.example.com}`,
		},
		{
			// Istio ignores what DISABLE cannot use.
			name: "tls disable with credential",
			spec: `
host: a
trafficPolicy:
  tls: {mode: DISABLE, credentialName: x, clientCertificate: /c.pem}`,
		},
		{
			// Istio ignores a client certificate that SIMPLE does not send.
			name: "tls simple with client key",
			spec: `
host: a
trafficPolicy:
  tls: {mode: SIMPLE, clientCertificate: /c.pem, privateKey: /k.pem}`,
		},
		{
			name: "tls credential with files",
			spec: `
host: a
subsets:
- name: simple
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: c, caCertificates: /ca.pem}}
- name: mutual
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: c, caCrl: /crl.pem}}`,
			want: []string{
				"spec.subsets[0].trafficPolicy.tls: credentialName is mutually exclusive with caCertificates",
				"spec.subsets[1].trafficPolicy.tls: credentialName is mutually exclusive with caCrl",
			},
		},
		{
			name: "tls insecure skip verify by mode",
			spec: `
host: a
subsets:
- name: simple-credential
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: c, insecureSkipVerify: true}}
- name: mutual-credential
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: c, insecureSkipVerify: true}}
- name: mutual-sans
  trafficPolicy: {tls: {mode: MUTUAL, credentialName: c, insecureSkipVerify: true, subjectAltNames: [b]}}
- name: ca-credential
  trafficPolicy: {tls: {mode: SIMPLE, caCertCredentialName: ca, insecureSkipVerify: true}}`,
			want: []string{
				"spec.subsets[0].trafficPolicy.tls.insecureSkipVerify: cannot skip verification while also setting credentialName",
				"spec.subsets[2].trafficPolicy.tls.insecureSkipVerify: cannot skip verification while also setting subjectAltNames",
			},
		},
		{
			name: "tls configmap credential",
			spec: `
host: a
subsets:
- name: own
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: "configmap://ns/ca"}}
- name: other
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: "configmap://other/ca"}}
- name: no-namespace
  trafficPolicy: {tls: {mode: SIMPLE, credentialName: "configmap://ca"}}`,
			want: []string{
				`spec.subsets[1].trafficPolicy.tls.credentialName: a configmap:// credential must be in the rule's own namespace "ns", not "other"`,
				`spec.subsets[2].trafficPolicy.tls.credentialName: want configmap://<namespace>/<name>, got "configmap://ca"`,
			},
		},
		{
			name: "tls insecure skip verify with ca",
			spec: `
host: a
trafficPolicy:
  tls: {mode: SIMPLE, insecureSkipVerify: true, caCertificates: /ca.pem}`,
			want: []string{"tls.insecureSkipVerify: cannot skip verification"},
		},
		{
			// A second entry for port 80 is admitted, as Istio admits it:
			// like Istio, the first entry for a port is the one used.
			name: "port level settings",
			spec: `
host: a
trafficPolicy:
  portLevelSettings:
  - port: {number: 80}
    loadBalancer: {simple: RANDOM}
  - port: {number: 0}
    loadBalancer: {simple: RANDOM}
  - port: {number: 70000}
    loadBalancer: {simple: RANDOM}
  - port: {number: 80}
    loadBalancer: {simple: RANDOM}
  - loadBalancer: {simple: RANDOM}
  - port: {number: 443}
    tls: {mode: MUTUAL}
    connectionPool: {tcp: {maxConnections: -1}}`,
			want: []string{
				"portLevelSettings[1].port.number: port number must be in 1..65535, got 0",
				"portLevelSettings[2].port.number: port number must be in 1..65535, got 70000",
				"portLevelSettings[4].port: is required",
				"portLevelSettings[5].connectionPool.tcp.maxConnections: must not be negative",
				"portLevelSettings[5].tls.clientCertificate",
				"portLevelSettings[5].tls.privateKey",
			},
		},
		{
			name: "tunnel ok",
			spec: `
host: a
trafficPolicy:
  tunnel: {protocol: POST, targetHost: 10.0.0.1, targetPort: 8443}`,
		},
		{
			name: "tunnel default protocol",
			spec: `
host: a
trafficPolicy:
  tunnel: {targetHost: example.com, targetPort: 443}`,
		},
		{
			name: "tunnel bad",
			spec: `
host: a
trafficPolicy:
  tunnel: {protocol: GET}`,
			want: []string{
				`tunnel.protocol: must be CONNECT or POST, got "GET"`,
				"tunnel.targetHost: is required",
				"tunnel.targetPort: port number must be in 1..65535, got 0",
			},
		},
		{name: "export to", spec: "host: a\nexportTo: ['.', 'istio-system']"},
		{name: "export to everyone", spec: "host: a\nexportTo: ['*']"},
		{
			// Istio allows "~" only on services: a rule meant for no one is
			// deleted instead.
			name: "export to nobody",
			spec: "host: a\nexportTo: ['~']",
			want: []string{`spec.exportTo: "~" (no namespace) is allowed only for services`},
		},
		{
			name: "export to bad",
			spec: "host: a\nexportTo: ['~', 'Bad_NS', '.', '.']",
			want: []string{
				`spec.exportTo: "~" (no namespace) is allowed only for services`,
				`spec.exportTo: namespace "Bad_NS"`,
				`spec.exportTo: duplicate entry "."`,
			},
		},
		{
			name: "export to everyone and more",
			spec: "host: a\nexportTo: ['*', 'istio-system']",
			want: []string{`spec.exportTo: "*" (every namespace) must be the only entry`},
		},
		{
			name: "export to own namespace twice",
			spec: "host: a\nexportTo: ['ns', 'istio-system', '.']",
			want: []string{`spec.exportTo: duplicate entry ".": it and "ns" both name this namespace`},
		},
		{name: "workload selector exported to own namespace", spec: "host: a\nworkloadSelector: {matchLabels: {app: x}}\nexportTo: ['.']"},
		{name: "workload selector exported to own namespace by name", spec: "host: a\nworkloadSelector: {matchLabels: {app: x}}\nexportTo: ['ns']"},
		{
			name: "workload selector exported elsewhere",
			spec: "host: a\nworkloadSelector: {matchLabels: {app: x}}\nexportTo: ['.', 'other', '*']",
			want: []string{
				`spec.exportTo: "*" (every namespace) must be the only entry`,
				`spec.exportTo: a rule with a workloadSelector applies only to proxies of its own namespace; exportTo may only name that namespace, not "other"`,
				`exportTo may only name that namespace, not "*"`,
			},
		},
		{
			// Istio only warns: the rule is for every proxy of its namespace.
			name: "workload selector empty",
			spec: "host: a\nworkloadSelector: {}",
		},
		{name: "workload selector", spec: "host: a\nworkloadSelector: {matchLabels: {app: x}}"},
		{
			name: "workload selector empty key and wildcard",
			spec: "host: a\nworkloadSelector: {matchLabels: {'': x, app: 'r*'}}",
			want: []string{
				`spec.workloadSelector.matchLabels: empty label key`,
				`spec.workloadSelector.matchLabels: value of "app": wildcards are not supported`,
			},
		},
		{
			name: "retry budget and warmup",
			spec: `
host: a
trafficPolicy:
  retryBudget: {percent: 150}
  loadBalancer:
    warmup: {duration: 0s, minimumPercent: 200, aggression: 0}`,
			want: []string{
				"loadBalancer.warmup.duration: duration must be at least",
				"loadBalancer.warmup.minimumPercent: must be between 0 and 100",
				"loadBalancer.warmup.aggression: must be greater than 0, got 0",
				"retryBudget.percent: must be between 0 and 100",
			},
		},
		{
			name: "subset traffic policy validated",
			spec: `
host: a
subsets:
- name: v1
  labels: {v: "1"}
  trafficPolicy:
    tls: {mode: MUTUAL, privateKey: /k}`,
			want: []string{"spec.subsets[0].trafficPolicy.tls.clientCertificate: mode MUTUAL needs"},
		},
		{
			// Istio refuses a policy that sets nothing, at every level.
			name: "empty traffic policies",
			spec: `
host: a
trafficPolicy: {}
subsets:
- name: v1
  trafficPolicy: {portLevelSettings: []}`,
			want: []string{
				"spec.trafficPolicy: must set at least one of",
				"spec.subsets[0].trafficPolicy: must set at least one of",
			},
		},
		{
			name: "port level entry without settings",
			spec: `
host: a
trafficPolicy:
  portLevelSettings:
  - port: {number: 80}
  - port: {number: 81}
    outlierDetection: {interval: 10s}`,
			want: []string{"portLevelSettings[0]: must set at least one of loadBalancer, connectionPool, outlierDetection or tls"},
		},
		{
			name: "tunnel with proxy protocol",
			spec: `
host: a
trafficPolicy:
  tunnel: {targetHost: proxy.example.com, targetPort: 3128}
  proxyProtocol: {version: V2}`,
			want: []string{"spec.trafficPolicy: only one of tunnel and proxyProtocol may be set"},
		},
		{
			name: "tunnel target host is a name or an address",
			spec: `
host: a
subsets:
- name: v4
  trafficPolicy: {tunnel: {targetHost: 192.168.1.1, targetPort: 443}}
- name: v6
  trafficPolicy: {tunnel: {targetHost: "2001:db8::1", targetPort: 443}}
- name: name
  trafficPolicy: {tunnel: {targetHost: Proxy.Example.com., targetPort: 443}}
- name: bad
  trafficPolicy: {tunnel: {targetHost: "proxy example", targetPort: 443}}
- name: numeric-tld
  trafficPolicy: {tunnel: {targetHost: proxy.123, targetPort: 443}}`,
			want: []string{
				`spec.subsets[3].trafficPolicy.tunnel.targetHost: must be a DNS name or an IP address, got "proxy example"`,
				`spec.subsets[4].trafficPolicy.tunnel.targetHost: must be a DNS name or an IP address, got "proxy.123"`,
			},
		},
		{
			name: "http2 upgrade with client protocol",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    http: {h2UpgradePolicy: UPGRADE, useClientProtocol: true}`,
			want: []string{"connectionPool.http.useClientProtocol: cannot be true when h2UpgradePolicy is UPGRADE"},
		},
		{
			name: "http2 keepalive needs interval and timeout",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    http: {http2KeepAlive: {interval: 10s}}
  portLevelSettings:
  - port: {number: 80}
    connectionPool:
      http: {http2KeepAlive: {}}`,
			want: []string{
				"spec.trafficPolicy.connectionPool.http.http2KeepAlive.timeout: is required",
				"portLevelSettings[0].connectionPool.http.http2KeepAlive.interval: is required",
				"portLevelSettings[0].connectionPool.http.http2KeepAlive.timeout: is required",
			},
		},
		{
			// Istio and Envoy take any count; 2^29 is only how far
			// "unlimited" (0) goes.
			name: "many requests per connection",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    http: {maxRequestsPerConnection: 1000000000}`,
		},
		{
			// Istio takes these durations in whole milliseconds only.
			name: "durations below millisecond precision",
			spec: `
host: a
trafficPolicy:
  connectionPool:
    tcp: {connectTimeout: 1.0005s, maxConnectionDuration: 2.0000001s, idleTimeout: 1.5s, tcpKeepalive: {time: 1.0001s, interval: 1.5s}}
    http: {idleTimeout: 10.0001s, http2KeepAlive: {interval: 1.0001s, timeout: 2s}}
  outlierDetection: {interval: 1.0001s, baseEjectionTime: 30.0001s}
  loadBalancer:
    warmup: {duration: 1.0001s}`,
			want: []string{
				"spec.trafficPolicy.loadBalancer.warmup.duration: must be whole milliseconds, got 1.0001s",
				"connectionPool.tcp.connectTimeout: must be whole milliseconds",
				"connectionPool.tcp.maxConnectionDuration: must be whole milliseconds",
				"connectionPool.tcp.tcpKeepalive.time: must be whole milliseconds",
				"connectionPool.http.idleTimeout: must be whole milliseconds",
				"connectionPool.http.http2KeepAlive.interval: must be whole milliseconds",
				"outlierDetection.interval: must be whole milliseconds",
				"outlierDetection.baseEjectionTime: must be whole milliseconds",
			},
		},
		{
			name: "local origin failures need the split",
			spec: `
host: a
subsets:
- name: split
  trafficPolicy: {outlierDetection: {splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailures: 5}}
- name: unsplit
  trafficPolicy: {outlierDetection: {consecutiveLocalOriginFailures: 5}}`,
			want: []string{"spec.subsets[1].trafficPolicy.outlierDetection.consecutiveLocalOriginFailures: counts only with splitExternalLocalOriginErrors: true"},
		},
		{
			name: "consistent hash cookie attributes",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash:
      httpCookie:
        name: session
        attributes: [{name: SameSite, value: Strict}, {name: ""}, {name: Secure}, {name: SameSite, value: Lax}]`,
			want: []string{
				"consistentHash.httpCookie.attributes[1].name: is required",
				`consistentHash.httpCookie.attributes[3].name: duplicate attribute "SameSite"`,
			},
		},
		{
			name: "consistent hash sizes",
			spec: `
host: a
subsets:
- name: ring-and-size
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, minimumRingSize: 1024, ringHash: {minimumRingSize: 2048}}}}
- name: maglev-and-size
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, minimumRingSize: 1024, maglev: {tableSize: 65537}}}}
- name: maglev-unsized
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {}}}}
- name: maglev-too-large
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 5000011}}}}
- name: maglev-one
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 1}}}}
- name: maglev-ok
  trafficPolicy: {loadBalancer: {consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}}`,
			want: []string{
				"spec.subsets[0].trafficPolicy.loadBalancer.consistentHash.minimumRingSize: cannot be set with ringHash or maglev",
				"spec.subsets[1].trafficPolicy.loadBalancer.consistentHash.minimumRingSize: cannot be set with ringHash or maglev",
				"spec.subsets[2].trafficPolicy.loadBalancer.consistentHash.maglev.tableSize: is required",
				"spec.subsets[3].trafficPolicy.loadBalancer.consistentHash.maglev.tableSize: must be less than 5000011, got 5000011",
			},
		},
		{
			// Envoy refuses a header name with these characters.
			name: "consistent hash header with line break",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    consistentHash: {httpHeaderName: "x-user\nx-evil"}`,
			want: []string{`consistentHash.httpHeaderName: must not contain NUL, CR or LF, got "x-user\nx-evil"`},
		},
		{
			name: "locality weights each in 1..100",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: r/z
        to: {"r/z1": 100, "r/z2": 0}`,
			want: []string{"localityLbSetting.distribute[0].to[r/z2]: weight must be in 1..100, got 0"},
		},
		{
			name: "locality names",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: "r/*/s"
        to: {"r": 100}
      - from: r//s
        to: {"r": 100}
      - from: "r/z/*"
        to: {"r/z1": 50, "r/z1/s": 50}
      - from: "r/*"
        to: {"*": 50, "q": 50}
      - from: "r/z/s"
        to: {"r/z": 100}`,
			want: []string{
				`distribute[0].from: "r/*/s": a "*" may only end a locality`,
				`distribute[1].from: "r//s": a region, zone or subzone is empty`,
				`distribute[2].to[r/z1/s]: "r/z1/s": overlaps an earlier locality of the list`,
				`distribute[3].to[q]: "q": overlaps an earlier locality of the list`,
				`distribute[4].from: "r/z/s": overlaps an earlier locality of the list`,
			},
		},
		{
			// Istio reads the list in order: a narrower entry before a
			// wider one is a specific case first, which it admits.
			name: "locality narrower first",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      distribute:
      - from: r/z
        to: {"r/z": 100}
      - from: "r/*"
        to: {"r/*": 100}`,
		},
		{
			name: "locality failover between regions only",
			spec: `
host: a
trafficPolicy:
  outlierDetection: {consecutive5xxErrors: 5}
  loadBalancer:
    localityLbSetting:
      failover:
      - {from: us-east, to: us-west}
      - {from: us-east/z1, to: us-west}
      - {from: "us-*", to: eu}
      failoverPriority: [topology.istio.io/network, topology.kubernetes.io/zone]`,
			want: []string{
				`localityLbSetting.failoverPriority[1]: "topology.kubernetes.io/zone" cannot be used with failover`,
				`localityLbSetting.failover[1]: from and to name regions, without "/"`,
				`localityLbSetting.failover[2]: from and to must not contain "*"`,
			},
		},
		{
			// Istio only warns that failover needs outlier detection.
			name: "locality failover priority alone",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      failoverPriority: [topology.kubernetes.io/region, topology.kubernetes.io/zone]`,
		},
		{
			name: "zone aware settings",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    zoneAwareLbSetting:
      failover:
      - {from: us-east, to: us-east}
      - {from: us-east/z1, to: "*"}
      failoverPriority: [topology.istio.io/network, topology.istio.io/subzone]`,
			want: []string{
				`zoneAwareLbSetting.failoverPriority[1]: "topology.istio.io/subzone" cannot be used in zoneAwareLbSetting, which routes by region, zone and subzone itself`,
				`zoneAwareLbSetting.failover[0]: from and to must differ`,
				`zoneAwareLbSetting.failover[1]: from and to name regions, without "/"`,
				`zoneAwareLbSetting.failover[1]: from and to must not contain "*"`,
			},
		},
		{
			// Below 1, traffic ramps up more slowly at first; Envoy takes any
			// aggression above 0.
			name: "warmup gentle aggression",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    warmup: {duration: 60s, aggression: 0.5}`,
		},
		{
			name: "warmup without duration",
			spec: `
host: a
trafficPolicy:
  loadBalancer:
    warmup: {minimumPercent: 10}`,
			want: []string{"loadBalancer.warmup.duration: is required"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name, ns := tc.drName, tc.namespace
			if name == "" {
				name = "dr"
			}
			if ns == "" {
				ns = "ns"
			}
			got := problemsOf(ValidateDestinationRule(name, ns, parseSpec(t, tc.spec)))
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

func TestValidateDestinationRuleNilSpec(t *testing.T) {
	if err := ValidateDestinationRule("a", "b", nil); err == nil || !strings.Contains(err.Error(), "spec: is required") {
		t.Fatalf("got %v, want a missing-spec error", err)
	}
}

func TestValidateDestinationRuleDoesNotMutate(t *testing.T) {
	dr := parseSpec(t, "host: a\nsubsets: [{name: v1, labels: {v: '1'}}]")
	before := dr.String()
	_ = ValidateDestinationRule("a", "b", dr)
	if dr.String() != before {
		t.Fatalf("spec changed: %s -> %s", before, dr.String())
	}
}

// A spec built in Go (not decoded) may hold nil list elements and empty
// oneof wrappers; each is reported, none panics.
func TestValidateDestinationRuleNilElements(t *testing.T) {
	hash := func(ch *v1alpha3.LoadBalancerSettings_ConsistentHashLB) *networking.TrafficPolicy {
		return &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &v1alpha3.LoadBalancerSettings_ConsistentHash{ConsistentHash: ch},
		}}
	}
	dr := &networking.DestinationRule{
		Host:             "a",
		WorkloadSelector: &v1beta1.WorkloadSelector{},
		TrafficPolicy: &networking.TrafficPolicy{
			PortLevelSettings: []*v1alpha3.TrafficPolicy_PortTrafficPolicy{nil},
			LoadBalancer: &networking.LoadBalancerSettings{
				LbPolicy: &v1alpha3.LoadBalancerSettings_BackendUtilization{},
				LocalityLbSetting: &v1alpha3.LocalityLoadBalancerSetting{
					Distribute: []*v1alpha3.LocalityLoadBalancerSetting_Distribute{nil},
					Failover:   []*v1alpha3.LocalityLoadBalancerSetting_Failover{nil},
				},
				ZoneAwareLbSetting: &v1alpha3.ZoneAwareLoadBalancerSetting{
					Failover: []*v1alpha3.ZoneAwareLoadBalancerSetting_Failover{nil},
				},
				Warmup: &v1alpha3.WarmupConfiguration{},
			},
			ConnectionPool: &v1alpha3.ConnectionPoolSettings{
				Http: &v1alpha3.ConnectionPoolSettings_HTTPSettings{Http2KeepAlive: &v1alpha3.ConnectionPoolSettings_HTTPSettings_ConnectionKeepalive{}},
				Tcp:  &v1alpha3.ConnectionPoolSettings_TCPSettings{TcpKeepalive: &v1alpha3.ConnectionPoolSettings_TCPSettings_TcpKeepalive{}},
			},
			OutlierDetection: &v1alpha3.OutlierDetection{},
			Tls:              &v1alpha3.ClientTLSSettings{},
			Tunnel:           &v1alpha3.TrafficPolicy_TunnelSettings{},
			RetryBudget:      &v1alpha3.TrafficPolicy_RetryBudget{},
		},
		Subsets: []*v1alpha3.Subset{
			nil,
			{Name: "empty-hash", TrafficPolicy: hash(nil)},
			{Name: "no-cookie", TrafficPolicy: hash(&v1alpha3.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &v1alpha3.LoadBalancerSettings_ConsistentHashLB_HttpCookie{},
			})},
			{Name: "nil-attribute", TrafficPolicy: hash(&v1alpha3.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &v1alpha3.LoadBalancerSettings_ConsistentHashLB_HttpCookie{
					HttpCookie: &v1alpha3.LoadBalancerSettings_ConsistentHashLB_HTTPCookie{Name: "c", Attributes: []*v1alpha3.LoadBalancerSettings_ConsistentHashLB_HTTPCookie_Attribute{nil}},
				},
			})},
			{Name: "no-maglev", TrafficPolicy: hash(&v1alpha3.LoadBalancerSettings_ConsistentHashLB{
				HashAlgorithm: &v1alpha3.LoadBalancerSettings_ConsistentHashLB_Maglev{},
			})},
			{Name: "no-ring", TrafficPolicy: hash(&v1alpha3.LoadBalancerSettings_ConsistentHashLB{
				HashAlgorithm: &v1alpha3.LoadBalancerSettings_ConsistentHashLB_RingHash_{},
			})},
		},
	}
	got := problemsOf(ValidateDestinationRule("dr", "ns", dr))
	for _, want := range []string{
		"spec.trafficPolicy.portLevelSettings[0].port: is required",
		"spec.trafficPolicy.loadBalancer.localityLbSetting.distribute[0].from: is required",
		"spec.trafficPolicy.loadBalancer.localityLbSetting.failover[0]: from and to are required",
		"spec.trafficPolicy.loadBalancer.zoneAwareLbSetting.failover[0]: from and to must differ",
		"spec.trafficPolicy.loadBalancer.warmup.duration: is required",
		"spec.trafficPolicy.tunnel.targetHost: is required",
		"spec.subsets[0].name: is required",
		"spec.subsets[1].trafficPolicy.loadBalancer.consistentHash: is empty",
		"spec.subsets[2].trafficPolicy.loadBalancer.consistentHash.httpCookie.name: is required",
		"spec.subsets[3].trafficPolicy.loadBalancer.consistentHash.httpCookie.attributes[0].name: is required",
		"spec.subsets[4].trafficPolicy.loadBalancer.consistentHash.maglev.tableSize: is required",
	} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want) }) {
			t.Errorf("no problem %q in:\n%s", want, strings.Join(got, "\n"))
		}
	}
}
