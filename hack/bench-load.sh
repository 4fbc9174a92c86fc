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

export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(hack/envtest-assets.sh)}
work=$(mktemp -d)
apiserver_pid=""
cleanup() {
	if [[ -n "$apiserver_pid" ]] && kill -0 "$apiserver_pid" 2>/dev/null; then
		kill -TERM "$apiserver_pid"
		wait "$apiserver_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-load: building bin/pilot and the API server runner" >&2
make --no-print-directory build >&2
go build -o "$work/apiserver" ./hack/apiserver

echo "bench-load: starting kube-apiserver and etcd" >&2
"$work/apiserver" --kubeconfig "$work/kubeconfig" >"$work/apiserver.log" 2>&1 &
apiserver_pid=$!
for _ in $(seq 240); do
	[[ -f "$work/kubeconfig" ]] && break
	if ! kill -0 "$apiserver_pid" 2>/dev/null; then
		cat "$work/apiserver.log" >&2
		echo "bench-load: the API server did not start" >&2
		exit 1
	fi
	sleep 0.5
done
[[ -f "$work/kubeconfig" ]] || { cat "$work/apiserver.log" >&2; echo "bench-load: no kubeconfig after 2 minutes" >&2; exit 1; }

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
