#!/usr/bin/env bash
# Runs every native Go fuzz target of the module, one after another, each
# for FUZZTIME (default 10m), with go test's -fuzz flag, in its own package.
#
#   hack/fuzz.sh                        every target, 10 minutes each
#   FUZZTIME=1m hack/fuzz.sh            every target, a minute each
#   FUZZTIME=30s hack/fuzz.sh ./pkg/xds/...   only these packages' targets
#
# FUZZPARALLEL sets -parallel (the number of fuzzing workers; go test's
# default is GOMAXPROCS). FUZZMINIMIZETIME (default 3s) bounds how long
# each new input is minimized: at go test's default of 60s,
# FuzzUnmarshalRequest spent most of a minute minimizing (no executions
# counted) and found 7 new inputs; at 3s it found 160 in the same minute.
# A target that fails leaves go test's report and its input under the
# package's testdata/fuzz/<Target>/, where plain `go test` (make test)
# replays it from then on; the other targets still run, and the script
# exits 1 naming the failed ones.
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-10m}"
FUZZMINIMIZETIME="${FUZZMINIMIZETIME:-3s}"
patterns=("$@")
if [ ${#patterns[@]} -eq 0 ]; then
	patterns=(./...)
fi
parallel=()
if [ -n "${FUZZPARALLEL:-}" ]; then
	parallel=(-parallel "$FUZZPARALLEL")
fi

# Only packages whose tests declare a fuzz target are built to list them.
mapfile -t pkgs < <(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . |
	xargs -r -n1 dirname | sort -u | sed 's|^\./||; s|^|./|')
wanted=$(go list "${patterns[@]}")
targets=()
for pkg in "${pkgs[@]}"; do
	# Keep the package if one of the patterns names it.
	grep -qFx "$(go list "$pkg")" <<<"$wanted" || continue
	while read -r name; do
		targets+=("$pkg $name")
	done < <(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
done
if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz.sh: no fuzz targets in ${patterns[*]}" >&2
	exit 1
fi

echo "fuzz.sh: ${#targets[@]} targets, $FUZZTIME each"
failed=()
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "=== $pkg $name"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" \
		-fuzzminimizetime "$FUZZMINIMIZETIME" "${parallel[@]}" "$pkg"; then
		failed+=("$pkg $name")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz.sh: failed:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
