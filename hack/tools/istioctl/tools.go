//go:build tools

// Package tools pins istioctl, which the e2e tests run against meshpilot to
// prove that Istio's own CLI works with it. It is a module of its own so
// that Istio's large dependency graph never moves the versions that
// kube-apiserver, etcd, kubectl and helm are built with (hack/tools).
package tools

import _ "istio.io/istio/istioctl/cmd/istioctl"
