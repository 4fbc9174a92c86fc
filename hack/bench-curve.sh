#!/usr/bin/env bash
# Runs the connect phase of the load scenario over a grid of sizes, the scale
# curve of issue 15: every Service count in BENCH_SERVICES against every
# sidecar count in BENCH_SIDECARS, each point a fresh control plane on the
# same API server, and prints one line per point. How memory grows with
# Services (the loaded RSS) and with clients (the peak's slope over the
# sidecar counts) is what the curve is for. Extra arguments go to `pilot
# load`; JSON reports land in BENCH_OUT (default: a temporary directory).
# The tool's clients hold what they check of their config, about 4 MiB of
# RSS each at 5,000 Services and under 20 at 20,000, so points beyond
# BENCH_MAX_PRODUCT (Services × sidecars, default 10,000,000: the whole
# default grid) are skipped rather than run a small machine out of memory.
#   hack/bench-curve.sh
#   BENCH_SERVICES="1000 5000" BENCH_SIDECARS="50 200" hack/bench-curve.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
services=${BENCH_SERVICES:-1000 5000 20000}
sidecars=${BENCH_SIDECARS:-50 200 500}
xds=${BENCH_XDS_ADDR:-127.0.0.1:25010}
http=${BENCH_HTTP_ADDR:-127.0.0.1:25080}
mon=${BENCH_MONITORING_ADDR:-127.0.0.1:25014}
max_product=${BENCH_MAX_PRODUCT:-10000000}

# shellcheck source=hack/lib/apiserver.sh
. hack/lib/apiserver.sh
out=${BENCH_OUT:-$work/reports}
mkdir -p "$out"
build_tools bench-curve
control_plane=$(deployed_copy bin/pilot)

for s in $services; do
	start_apiserver bench-curve
	echo "bench-curve: writing $s services" >&2
	bin/pilot load --kubeconfig "$work/kubeconfig" --services "$s" --write-only -q "$@"
	for k in $sidecars; do
		if ((s * k > max_product)); then
			echo "bench-curve: skipping $s services × $k sidecars (BENCH_MAX_PRODUCT)" >&2
			continue
		fi
		echo "bench-curve: $s services, $k sidecars" >&2
		bin/pilot load --kubeconfig "$work/kubeconfig" --xds-addr "$xds" --inputs-exist -q \
			--services "$s" --sidecars "$k" --phases connect --json-out "$out/$s-$k.json" \
			--metrics-url "http://$mon/metrics" --control-plane-log "$work/pilot-$s-$k.log" "$@" -- \
			"$control_plane" discovery --kubeconfig "$work/kubeconfig" --xds-addr "$xds" --http-addr "$http" \
			--monitoring-addr "$mon" --secure-xds-addr "" --webhook-addr "" --log-level warn >/dev/null
	done
	stop_apiserver
done

mib='(. / 1048576 | . * 10 | round / 10)'
printf '%8s %8s %9s %9s %9s %12s %11s %10s\n' services sidecars "p50 ms" "p90 ms" "cp CPU s" "loaded MiB" "peak MiB" "tool CPU s"
for s in $services; do
	for k in $sidecars; do
		[[ -f "$out/$s-$k.json" ]] || continue
		jq -r "[.scenario.services, (.clients | add), (.phases[0].latency.p50Ms | round),
			(.phases[0].latency.p90Ms | round), (.phases[0].controlPlaneCpuSeconds * 100 | round / 100),
			(.controlPlaneLoadedRssBytes | $mib), (.controlPlanePeakRssBytes | $mib),
			(.phases[0].toolCpuSeconds * 100 | round / 100)] | @tsv" "$out/$s-$k.json" |
			awk -F'\t' '{printf "%8s %8s %9s %9s %9s %12s %11s %10s\n", $1, $2, $3, $4, $5, $6, $7, $8}'
	done
done
echo "reports: $out" >&2
