# Sourced by the load benchmarks: builds bin/pilot and hack/apiserver, and
# starts kube-apiserver and etcd (the envtest assets) with meshpilot's CRDs.
# After start_apiserver, $work/kubeconfig reaches it; the EXIT trap stops it
# and removes $work.
export KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS:-$(hack/envtest-assets.sh)}
work=$(mktemp -d)
apiserver_pid=""
stop_apiserver() {
	if [[ -n "$apiserver_pid" ]] && kill -0 "$apiserver_pid" 2>/dev/null; then
		kill -TERM "$apiserver_pid"
		wait "$apiserver_pid" 2>/dev/null || true
	fi
	apiserver_pid=""
	rm -f "$work/kubeconfig"
}
trap 'stop_apiserver; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

build_tools() {
	echo "$1: building bin/pilot and the API server runner" >&2
	make --no-print-directory build >&2
	go build -o "$work/apiserver" ./hack/apiserver
}

# deployed_copy BINARY copies BINARY into $work and prints the copy's path;
# the benchmarks run the control plane from it. The same bytes map some
# 15 MiB more file-backed RSS while the page cache holds them as the Go
# linker wrote them (through a shared mapping) than once they were written
# with write(2), as cp and a container runtime unpacking an image layer
# write them, or read back from disk (docs/performance.md, "Idle RSS").
deployed_copy() {
	local copy
	copy="$work/$(basename "$1")-deployed"
	cp "$1" "$copy"
	echo "$copy"
}

# start_apiserver NAME starts a fresh API server (empty etcd) and waits for
# its kubeconfig; NAME prefixes the messages.
start_apiserver() {
	echo "$1: starting kube-apiserver and etcd" >&2
	"$work/apiserver" --kubeconfig "$work/kubeconfig" >"$work/apiserver.log" 2>&1 &
	apiserver_pid=$!
	for _ in $(seq 240); do
		[[ -f "$work/kubeconfig" ]] && return 0
		if ! kill -0 "$apiserver_pid" 2>/dev/null; then
			cat "$work/apiserver.log" >&2
			echo "$1: the API server did not start" >&2
			exit 1
		fi
		sleep 0.5
	done
	cat "$work/apiserver.log" >&2
	echo "$1: no kubeconfig after 2 minutes" >&2
	exit 1
}
