#!/usr/bin/env bash
# Builds the binaries that tests run (kube-apiserver, etcd and kubectl for
# envtest; helm for the chart tests) from the modules pinned in hack/tools,
# into $1 (default bin/k8s/<versions>), and prints that directory. With
# --istioctl it also builds istioctl, for the e2e test that runs Istio's CLI
# against meshpilot (make test-istioctl), from hack/tools/istioctl.
# The stamp file records the versions, one line per group of binaries, so a
# warm cache is a no-op and bumping one group rebuilds only that group.
set -euo pipefail
with_istioctl=false
if [[ "${1:-}" == --istioctl ]]; then
  with_istioctl=true
  shift
fi
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
k8s_version=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$tools/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$tools/go.mod")
helm_version=$(awk '$1=="helm.sh/helm/v3"{print $2}' "$tools/go.mod")
# istioctl has a module of its own: Istio's dependencies must not move the
# versions the API server is built with.
# (go mod tidy writes a lone direct requirement on the require line itself.)
istio_version=$(awk '$1=="istio.io/istio"{print $2} $1=="require" && $2=="istio.io/istio"{print $3}' "$tools/istioctl/go.mod")
[[ -n "$istio_version" ]] || { echo "no istio.io/istio requirement in $tools/istioctl/go.mod" >&2; exit 1; }
go_version=$(go env GOVERSION)
out=${1:-"$root/bin/k8s/$k8s_version-etcd-$etcd_version"}
stamp="$out/.stamp"
# Line 1: the API server group; line 2: helm; line 3: istioctl.
# The go.sum digests stand for every other module a group is built with.
tools_sum=$(sha256sum "$tools/go.sum" | cut -c1-12)
istioctl_sum=$(sha256sum "$tools/istioctl/go.sum" | cut -c1-12)
want_k8s="kubernetes=$k8s_version etcd=$etcd_version go=$go_version sum=$tools_sum"
want_helm="helm=$helm_version go=$go_version sum=$tools_sum"
want_istioctl="istioctl=$istio_version go=$go_version sum=$istioctl_sum"
have_k8s=$(sed -n 1p "$stamp" 2>/dev/null || true)
have_helm=$(sed -n 2p "$stamp" 2>/dev/null || true)
have_istioctl=$(sed -n 3p "$stamp" 2>/dev/null || true)
istioctl_ready() { [[ "$have_istioctl" == "$want_istioctl" && -x "$out/istioctl" ]]; }
if [[ "$have_k8s" == "$want_k8s" && "$have_helm" == "$want_helm" && -x "$out/helm" ]] &&
   { ! $with_istioctl || istioctl_ready; }; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
cd "$tools"
# The compiler and linker collect garbage a quarter as often: a fifth less
# CPU for these builds (see BUILD_GOGC in the Makefile).
export GOGC="${GOGC:-400}"
# No -trimpath and the default cgo setting: the packages these binaries share
# with meshpilot's own build (the standard library, client-go, apimachinery,
# grpc, protobuf...) then compile to the same build-cache entries as `go vet`
# and `go test` compile them, once for both. hack/tools/go.mod pins the shared
# modules at meshpilot's versions for the same reason.
if [[ "$have_k8s" != "$want_k8s" || "$have_helm" != "$want_helm" || ! -x "$out/helm" ]]; then
  minor=${k8s_version#v1.}; minor=${minor%%.*}
  k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  # Without the version variable helm reports "v3.21" and charts that
  # check kubeVersion/helm version see a wrong value.
  helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
  echo "building kube-apiserver, kubectl ($k8s_version), etcd ($etcd_version) and helm ($helm_version) into $out" >&2
  # One go build for the four: each link (single-threaded, seconds each)
  # overlaps the compiling of the others. -ldflags=pattern=... gives each
  # binary its own version variables; the last matching pattern wins.
  go build -o "$out/" -ldflags="-s -w" \
    -ldflags="k8s.io/kubernetes/cmd/...=$k8s_ldflags" \
    -ldflags="helm.sh/helm/v3/cmd/helm=$helm_ldflags" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl ./etcd helm.sh/helm/v3/cmd/helm
fi
# Line 3 stays as it was until istioctl is built.
printf '%s\n%s\n%s\n' "$want_k8s" "$want_helm" "$have_istioctl" > "$stamp"
if $with_istioctl && ! istioctl_ready; then
  # The longest build here (three minutes on two cores, cold, sharing little
  # with the rest); cached like the rest.
  echo "building istioctl (istio.io/istio $istio_version) into $out" >&2
  (cd "$tools/istioctl" && go build \
    -ldflags "-s -w -X istio.io/istio/pkg/version.buildVersion=$istio_version -X istio.io/istio/pkg/version.buildStatus=Clean" \
    -o "$out/istioctl" istio.io/istio/istioctl/cmd/istioctl)
  printf '%s\n%s\n%s\n' "$want_k8s" "$want_helm" "$want_istioctl" > "$stamp"
fi
echo "$out"
