// Package xdstest is test support for xDS generators: it builds a store from
// plain Kubernetes YAML through the real ingester, validates generated
// resources deeply, compares golden files with the repo-wide -update
// flag, routes a request through one proxy's generated configuration
// as Envoy would (Simulation), and follows an ADS server as Envoy's xDS
// client would (EnvoyClient). Only tests import it.
package xdstest
