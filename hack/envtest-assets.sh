#!/usr/bin/env bash
# Builds the binaries that envtest runs (kube-apiserver, etcd, kubectl) from
# the modules pinned in hack/tools, into $1 (default bin/k8s/<versions>).
# A stamp file records the versions so that a warm cache makes this a no-op.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$tools/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$tools/go.mod")
out=${1:-"$root/bin/k8s/$k8s_version-etcd-$etcd_version"}
stamp="$out/.stamp"
want="kubernetes=$k8s_version etcd=$etcd_version go=$(go env GOVERSION)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
cd "$tools"
export CGO_ENABLED=0
echo "building kube-apiserver, kubectl ($k8s_version) and etcd ($etcd_version) into $out" >&2
go build -trimpath -ldflags "$ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ldflags" -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl
go build -trimpath -ldflags "-s -w" -o "$out/etcd" ./etcd
echo "$want" > "$stamp"
echo "$out"
