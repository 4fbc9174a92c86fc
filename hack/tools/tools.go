//go:build tools

// Package tools pins the binaries that tests run: a real kube-apiserver,
// etcd, kubectl and helm, built from source so no download site is needed.
// The modules they share with meshpilot are pinned at meshpilot's versions
// (hack/envtest-assets.sh says why).
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
