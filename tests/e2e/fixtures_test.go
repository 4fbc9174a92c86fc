package e2e

import (
	"bytes"
	"text/template"
)

// fixtures fill the YAML templates of the flow.
type fixtures struct {
	NS, IP, Host string
	PortA, PortB int
	// Set per rendering of sliceYAML.
	Pod  string
	Port int
}

func (f fixtures) render(tmpl string, slice ...any) string {
	if len(slice) == 2 {
		f.Pod, f.Port = slice[0].(string), slice[1].(int)
	}
	var buf bytes.Buffer
	if err := template.Must(template.New("").Parse(tmpl)).Execute(&buf, f); err != nil {
		panic(err) // the templates are constants of this package
	}
	return buf.String()
}

const namespaceYAML = `
apiVersion: v1
kind: Namespace
metadata:
  name: {{.NS}}
`

const serviceYAML = `
apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: {{.NS}}
spec:
  selector:
    app: echo
  ports:
  - name: grpc
    port: 7070
    targetPort: grpc
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-a
  namespace: {{.NS}}
  labels: {app: echo, version: v1}
spec:
  containers: [{name: echo, image: example/echo}]
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-b
  namespace: {{.NS}}
  labels: {app: echo, version: v2}
spec:
  containers: [{name: echo, image: example/echo}]
`

// sliceYAML is one backend's EndpointSlice; the ports of a slice apply to
// all its endpoints, and both backends share one IP.
const sliceYAML = `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {{.Pod}}
  namespace: {{.NS}}
  labels:
    kubernetes.io/service-name: echo
addressType: IPv4
ports:
- name: grpc
  port: {{.Port}}
endpoints:
- addresses: ["{{.IP}}"]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: {{.Pod}}, namespace: {{.NS}}}
`

const ruleYAML = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: echo
  namespace: {{.NS}}
spec:
  host: {{.Host}}
  trafficPolicy:
    loadBalancer: {simple: LEAST_REQUEST}
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v2
    labels: {version: v2}
    trafficPolicy:
      loadBalancer:
        consistentHash: {httpHeaderName: x-user}
`

// routeYAML sends every call to subset v1 of ruleYAML.
const routeYAML = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: echo
  namespace: {{.NS}}
spec:
  hosts: [echo]
  http:
  - route:
    - destination: {host: echo, subset: v1}
`

// invalidRouteYAML passes the CRD's schema but not Istio's rules: a subset
// name is no DNS label. It must be reported and skipped, and never disturb
// the valid VirtualService of the same host.
const invalidRouteYAML = `
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: invalid
  namespace: {{.NS}}
spec:
  hosts: [{{.Host}}]
  http:
  - route:
    - destination: {host: echo, subset: Not_A_Label}
`

// invalidRuleYAML passes the CRD's schema but not Istio's rules: two subsets
// share a name. It must be reported and skipped, and never disturb the rest.
const invalidRuleYAML = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: invalid
  namespace: {{.NS}}
spec:
  host: {{.Host}}
  subsets:
  - name: same
    labels: {version: v1}
  - name: same
    labels: {version: v2}
`
