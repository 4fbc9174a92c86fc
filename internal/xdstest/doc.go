// Package xdstest is test support for xDS generators: it builds a store from
// plain Kubernetes YAML through the real ingester, validates generated
// resources deeply, and compares golden files with the repo-wide -update
// flag. Only tests import it.
package xdstest
