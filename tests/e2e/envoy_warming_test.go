package e2e

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshpilot/meshpilot/internal/xdstest"
)

// warmBound is how long a proxy may take to become fully warm after a
// change. It bounds a broken control plane; it does not measure speed.
const warmBound = 20 * time.Second

// requestLog lists what a client sent, one request a line.
func requestLog(c *xdstest.EnvoyClient) string {
	var b strings.Builder
	for _, r := range c.Requests() {
		fmt.Fprintf(&b, "  %v\n", r)
	}
	return b.String()
}

// lbRuleYAML is a DestinationRule for echo with the given simple load
// balancer.
func lbRuleYAML(simple string) string {
	return `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: {{.NS}}}
spec:
  host: echo.{{.NS}}.svc.cluster.local
  trafficPolicy:
    loadBalancer: {simple: ` + simple + `}
`
}
