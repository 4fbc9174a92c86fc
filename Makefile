# meshpilot developer targets. `make test` and `make test-istioctl` are what
# CI runs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/meshpilot/meshpilot/internal/version.Version=$(VERSION)
BIN       := bin
# Packages with golden files; `make update-golden` rewrites them.
GOLDEN_PKGS := ./pkg/xds/grpcgen/... ./pkg/xds/envoygen/... ./pkg/xds/wdsgen/... ./pkg/webhook/... ./tests/helm/...
# Packages with concurrency (push loop and streams, informers, leader
# election, status writer, file watcher, certificate rotation, CA, node
# proxy, HBONE, CNI agent) run under the race detector, once: `make test`
# runs them with -race instead of without. The longest first (see LONG_PKGS).
RACE_PKGS   := ./pkg/controllers/... ./pkg/ca/... ./pkg/webhook/... ./pkg/xds/... ./pkg/model/... ./pkg/pushcontext/... \
               ./pkg/dirwatch/... ./pkg/caclient/... ./pkg/nodeproxy/... ./pkg/hbone/... ./pkg/cni/...
# The packages whose tests run longest (minutes), which go test starts first
# when they come first: listed last, as ./... lists them, the end-to-end
# tests ran alone for minutes after everything else had finished.
LONG_PKGS   := ./tests/e2e ./tests/helm
# -ldflags=-w: test binaries without DWARF link a third faster, and make test
# links some fifty of them; panics and stack traces do not need it.
# -parallel 4: the tests that start an API server of their own are parallel.
# They mostly wait on it (pkg/controllers used 0.7 of a core), so four at a
# time rather than GOMAXPROCS's two.
TEST_FLAGS  ?= -count=1 -timeout 15m -ldflags=-w -parallel 4
# The compiler, linker and vet collect garbage a quarter as often as by
# default: a fifth less CPU for the same build (a cold build of
# ./pkg/controllers and ./pkg/xds/...: 375 and 393 s of user CPU at GOGC=100,
# 306 and 291 s at 400), for some 40 % more memory per compile. The test
# binaries run with the runtime's default (GO_TEST's -exec), so the tests
# that bound memory measure what users run.
BUILD_GOGC  ?= 400
GO_TEST      = GOGC=$(BUILD_GOGC) $(GO) test $(TEST_FLAGS) -exec "env -u GOGC"

.PHONY: all build run test test-istioctl test-unit test-race test-long envtest-assets bench bench-load bench-curve fuzz generate manifests helm-lint update-golden vet lint fmt clean

all: build

build: ## Build bin/pilot.
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/pilot ./cmd/pilot

run: build ## Run the control plane on the example mesh (no cluster needed); ARGS="--xds-addr 127.0.0.1:25010 ..." adds flags.
	$(BIN)/pilot discovery --config-dir examples/mesh $(ARGS)

envtest-assets: ## Build kube-apiserver, etcd, kubectl, helm and istioctl from pinned modules (cached under bin/).
	@echo "envtest assets: $$(hack/envtest-assets.sh --istioctl)"

# make test runs the race-detector half beside the rest, not after it: the
# end-to-end tests spend most of their minutes waiting for API servers and
# processes, on one core or less, while compiling every dependency for the
# race detector keeps two busy. Its lines are marked "race:".
# The race detector's build of the concurrent packages starts at once, beside
# the build of the API server and its tools: the two share no compiled
# package (every package is compiled again under -race), so neither waits for
# the other's work, and each fills the other's gaps (the tools' links run on
# one core). The race half's tests start when both are done; the plain half's
# when the tools are. Both halves skip go test's own vet pass (-vet=off), a
# subset of the go vet that make lint runs.
test: ## Run every test but TestIstioctl (make test-istioctl): unit, real API server, end to end; the concurrent packages under the race detector.
	@setsid bash -c 'GOGC=$(BUILD_GOGC) $(GO) build -race $(RACE_PKGS) >/dev/null 2>&1' & prebuild=$$!; \
	pids=$$prebuild; trap 'for p in $$pids; do kill -TERM -- -$$p 2>/dev/null || true; done' INT TERM EXIT; \
	assets="$$(hack/envtest-assets.sh)" || exit; \
	echo "KUBEBUILDER_ASSETS=$$assets"; export KUBEBUILDER_ASSETS="$$assets"; \
	GOGC=$(BUILD_GOGC) $(GO) build -ldflags=-w -o $(BIN)/test/pilot ./cmd/pilot || exit; \
	export MESHPILOT_TEST_PILOT="$(CURDIR)/$(BIN)/test/pilot"; \
	race="$$($(GO) list $(RACE_PKGS))"; \
	long="$$($(GO) list $(LONG_PKGS))"; \
	$(GO_TEST) -vet=off -skip '^TestIstioctl$$' $$long $$($(GO) list ./... | grep -vxF "$$race" | grep -vxF "$$long") & plain=$$!; \
	wait $$prebuild || true; \
	setsid bash -o pipefail -c '$(GO_TEST) -vet=off -race $(RACE_PKGS) 2>&1 | sed -u "s/^/race: /"' & race_pid=$$!; \
	pids="$$pids $$race_pid"; \
	status=0; \
	wait $$plain || status=$$?; \
	wait $$race_pid || status=$$?; \
	exit $$status

# istioctl is three minutes of a cold build for one ten-second test, and
# shares little with the rest: built for that test alone, not by make test.
test-istioctl: ## Run the e2e test that runs Istio's CLI (istioctl, built from a pinned istio.io/istio) against meshpilot.
	@KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh --istioctl)" $(GO_TEST) -run '^TestIstioctl$$' ./tests/e2e/

test-race: ## Run the concurrent packages' tests (with the real API server) under the race detector.
	@KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" $(GO_TEST) -race $(RACE_PKGS)

test-long: ## The minute-long soak: 500 streams through a minute of endpoint churn at 200 Services (peak RSS and heap in the log); make test runs a short version.
	@KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" MESHPILOT_TEST_LONG=1 $(GO) test -count=1 -timeout 15m -v -run TestManyStreamsThroughChurn ./tests/e2e/

test-unit: ## Run tests that need no API server.
	$(GO_TEST) -short ./pkg/...

bench: ## Run the benchmarks of the hot paths (a restart needs the real API server).
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" $(GO) test -run '^$$' -bench . -benchmem -count=1 ./pkg/...

bench-load: ## Run the standard load scenario (5,000 services × 10 endpoints, 50 sidecars) against a real API server and bin/pilot; ARGS="--json-out load.json" adds flags.
	hack/bench-load.sh $(ARGS)

bench-curve: ## Run the connect storm over a grid of sizes (BENCH_SERVICES × BENCH_SIDECARS, default 1000 5000 20000 × 50 200 500); ARGS adds pilot load flags.
	hack/bench-curve.sh $(ARGS)

FUZZTIME ?= 10m
fuzz: ## Fuzz every Go fuzz target in turn, FUZZTIME each (default 10m); a failing input lands in testdata/fuzz/<Target>/ (commit it: make test replays it).
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

generate: ## Regenerate committed generated files (CRDs from istio.io/api, also into charts/base/crds; the chart's injection template; Go code of the .proto files in api/).
	$(GO) run ./hack/crdextract
	$(GO) run ./hack/protogen
	rm -f charts/base/crds/*.gen.yaml
	cp manifests/crds/*.gen.yaml charts/base/crds/
	cp pkg/webhook/inject/defaults/config.yaml charts/pilot/files/injection-config.yaml

manifests: ## Render the charts with default values into manifests/ (for users without Helm).
	hack/manifests.sh

helm-lint: ## Lint the charts with the pinned helm.
	@helm="$$(hack/envtest-assets.sh)/helm"; tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	HELM_CACHE_HOME="$$tmp" HELM_CONFIG_HOME="$$tmp" HELM_DATA_HOME="$$tmp" "$$helm" lint --strict charts/base charts/pilot charts/cni

update-golden: ## Rewrite golden files (and the values tables of the READMEs); review the diff before committing.
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" $(GO) test $(GOLDEN_PKGS) -update

vet: ## Run go vet over every package (make lint runs it before staticcheck).
	GOGC=$(BUILD_GOGC) $(GO) vet ./...

STATICCHECK_VERSION ?= v0.8.2
lint: vet ## Run go vet, then staticcheck (version pinned, fetched through the Go module proxy), over every package; a deliberate use of a deprecated API carries a //lint:ignore saying why.
	GOGC=$(BUILD_GOGC) $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)/pilot
