//go:build tools

// Package tools pins istioctl, which the e2e tests run against meshpilot to
// prove that Istio's own CLI works with it. It is a module of its own so
// that Istio's large dependency graph never moves the versions that
// kube-apiserver, etcd, kubectl and helm are built with (hack/tools).
//
// The modules it shares with meshpilot (client-go, api, apimachinery, grpc,
// protobuf, go-control-plane, istio.io/api and the rest) are pinned at
// meshpilot's versions, so that the packages of both compile once into the
// build cache: from a cold cache that halves istioctl's build. Four stay
// where Istio's code needs them: prometheus/client_golang v1.23 (its query
// API changed in v1.25), and with it k8s.io/apiserver, component-base,
// kubectl and apiextensions-apiserver at v0.36.1.
package tools

import _ "istio.io/istio/istioctl/cmd/istioctl"
