#!/usr/bin/env bash
# Runs the standard load scenario of issue 15: 5,000 Services × 10 endpoints
# in 50 namespaces, 50 Envoy sidecars (SotW), against a real kube-apiserver
# and etcd (the envtest assets) and the built bin/pilot, and prints the
# table of `pilot load`. Extra arguments go to `pilot load`, e.g.
#   hack/bench-load.sh -o json > load.json
#   hack/bench-load.sh --services 1000 --sidecars 20 --delta-sidecars 5
# The control plane runs as a process of its own, started (and restarted,
# for the reconnect phase) by `pilot load`, which samples its CPU and RSS
# from /proc. Its ports are set by BENCH_XDS_ADDR, BENCH_HTTP_ADDR and
# BENCH_MONITORING_ADDR (defaults away from `make run`'s).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
xds=${BENCH_XDS_ADDR:-127.0.0.1:25010}
http=${BENCH_HTTP_ADDR:-127.0.0.1:25080}
mon=${BENCH_MONITORING_ADDR:-127.0.0.1:25014}
# BENCH_CONTROL_PLANE runs another build of the control plane (say, of an
# older commit) under the same tool, to compare the two.
control_plane=${BENCH_CONTROL_PLANE:-bin/pilot}

# shellcheck source=hack/lib/apiserver.sh
. hack/lib/apiserver.sh
build_tools bench-load
control_plane=$(deployed_copy "$control_plane")
start_apiserver bench-load

status=0
bin/pilot load --kubeconfig "$work/kubeconfig" --xds-addr "$xds" \
	--metrics-url "http://$mon/metrics" --control-plane-log "$work/pilot.log" "$@" -- \
	"$control_plane" discovery --kubeconfig "$work/kubeconfig" --xds-addr "$xds" --http-addr "$http" \
	--monitoring-addr "$mon" --secure-xds-addr "" --webhook-addr "" --log-level warn || status=$?
if [[ $status -ne 0 || -s "$work/pilot.log" ]]; then
	echo "bench-load: the control plane's warnings and errors (last 20 lines):" >&2
	tail -n 20 "$work/pilot.log" >&2 || true
fi
exit $status
