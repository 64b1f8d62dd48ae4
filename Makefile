# proctor: run LLM agents on sandboxed tasks and score them.
# `make` lists the targets.

GO        ?= go
BIN       ?= bin/proctor
BUNDLED   := host/plugin/bundled/wasm
PLUGINS   := $(notdir $(wildcard plugins/tb2 plugins/swesmith plugins/sweshaped))
TESTFLAGS ?= -timeout 40m
# The SDK is a module of its own (sdk/go.mod): ./... from here leaves it out.
SDK       := sdk
BENCHFLAGS ?= -run '^$$' -bench . -benchmem -count 5 -timeout 60m

.DEFAULT_GOAL := help
.PHONY: help build plugins warden tmux tmux-background test-setup test-compile test-compile-early test test-race bench bench-scale bench-e2e lint demo clean engine base-image fixture-images test-tools python-runtime python-runtime-background test-python k8s-build k8s-up k8s-down agents test-agents

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

plugins: ## build the bundled plugins to wasm (embedded by build)
	@mkdir -p $(BUNDLED)
	@for p in $(PLUGINS); do \
	  echo "plugin $$p"; \
	  GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -ldflags='-s -w' -o $(BUNDLED)/$$p.wasm ./plugins/$$p || exit 1; \
	done

python-runtime: ## build the Python plugin runtime from Debian's sources (once per machine; cached)
	@bash sdk/python/runtime/build.sh

tmux: ## build the static tmux Terminus-2 brings into images without one, from Debian's sources (once per machine; cached)
	@bash agent/terminus/tmuxbin/build.sh

# The tests that need the runtime wait for a build under way (its lock), so
# the suite starts at once and the runtime builds beside it. The background
# builds run niced: they yield the cores to the packages' compiling, which
# every test waits for, where only some tests wait for them.
python-runtime-background: ## start building the Python runtime, if it is not built, and return
	@nice -n 10 bash sdk/python/runtime/build.sh --background

tmux-background: ## start building the static tmux, if it is not built, and return (its users wait for it)
	@nice -n 10 bash agent/terminus/tmuxbin/build.sh --background

test-python: ## run the Python SDK's and the Python plugins' native tests with this machine's python3
	PYTHONPATH=sdk/python python3 -m unittest discover -s sdk/python/tests -t sdk/python/tests
	@for d in plugins/python/*/; do PYTHONPATH=sdk/python python3 -m unittest discover -s $$d -t $$d || exit 1; done

WARDEN    := sandbox/shell/warden

warden: ## build the in-sandbox warden for linux/amd64 and linux/arm64 (embedded by build)
	@for a in amd64 arm64; do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -ldflags='-s -w' -o $(WARDEN)/warden-linux-$$a ./sandbox/warden || exit 1; \
	done

# proctor version and run manifests say which commit built the binary
# (go build's own VCS stamp misses git worktrees and GOFLAGS=-buildvcs=false).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)

build: plugins warden ## build bin/proctor with its bundled plugins
	$(GO) build -trimpath -ldflags "-X main.linkVersion=$(VERSION) -X main.linkRevision=$(REVISION)" -o $(BIN) ./cmd/proctor

engine: ## make sure a Docker engine answers (installs and starts Debian's when missing)
	@bash scripts/engine.sh

base-image: engine ## build the local test base image from Debian packages
	@bash scripts/base-image.sh

fixture-images: base-image ## build the test fixtures' images (offline, from the base image)
	@docker image inspect proctor-swesmith-fixture:2 >/dev/null 2>&1 || docker build -q -t proctor-swesmith-fixture:2 testdata/swesmith/image >/dev/null
	@docker image inspect proctor-swesmith-textkit:1 >/dev/null 2>&1 || docker build -q -t proctor-swesmith-textkit:1 testdata/swesmith/textkit >/dev/null
	@bash scripts/go-fixture-image.sh

# After the engine: its install takes the apt lock first, since the images
# wait for it and nothing waits for the browser.
test-tools: engine ## install the registry and browser the tests drive (Debian packages) when missing
	@bash scripts/test-tools.sh

k8s-build: ## build the local Kubernetes cluster's binaries into the cache, once per version
	@bash scripts/k8s.sh build

k8s-up: base-image ## start a local single-node Kubernetes cluster (as root; see docs/kubernetes.md)
	@bash scripts/k8s.sh up

k8s-down: ## stop the local Kubernetes cluster, leaving nothing running or mounted
	@bash scripts/k8s.sh down

agents: base-image ## install the bundled installed agents' pinned CLIs from npm into layers over the test image (once; the tests then run offline)
	PROCTOR_INSTALL_AGENTS=1 $(GO) test -run '^TestInstallAgents$$' -count=1 -timeout 30m -v ./cmd/proctor

test-agents: agents plugins warden ## the real-CLI tests of installed agents (Claude Code, Codex, Gemini CLI, OpenCode), a missing CLI failing
	PROCTOR_REQUIRE_AGENTS=1 PROCTOR_REQUIRE_DOCKER=1 $(GO) test -run '^TestInstalledAgent' -count=1 -timeout 40m ./cmd/proctor

# What the tests need, all at once: the engine and images (network and
# disk), the test tools (apt: one install at a time, scripts/apt-lock.sh),
# the plugins and the warden, and every package and test package compiled
# into the Go build cache (go list -export: compiled, not linked). On a
# fresh machine the downloads and the compiling then overlap, and go test
# starts with only the test binaries left to link. The Python runtime and
# tmux go on building in the background; the tests that need them wait for
# their builds' locks.
test-setup: ## prepare everything the tests need, in parallel
	@start=$$(date +%s); $(MAKE) --no-print-directory -j4 fixture-images test-tools python-runtime-background tmux-background test-compile && \
	  echo "test-setup: ready in $$(( $$(date +%s) - start )) s"

# A package that does not compile is go test's to report, with its tests.
# The first pass starts at once, beside the plugins' and the warden's
# builds (their folders hold a .keep, so what embeds them compiles too):
# the standard library and the modules, most of the work, are in the cache
# by the time those builds end; the second pass compiles what embeds them,
# and what imports that, again.
COMPILE   := $(GO) list -export -test -deps ./... >/dev/null 2>&1 || true

test-compile: test-compile-early plugins warden
	@$(COMPILE)
	@cd $(SDK) && $(COMPILE)

test-compile-early:
	@$(COMPILE)

test: test-setup ## run the tests (starts what they need first)
	$(GO) test $(TESTFLAGS) ./...
	cd $(SDK) && $(GO) test $(TESTFLAGS) ./...

test-race: test-setup ## run the tests under the race detector
	$(GO) test -race $(TESTFLAGS) ./...
	cd $(SDK) && $(GO) test -race $(TESTFLAGS) ./...

bench: fixture-images plugins warden python-runtime ## run the benchmarks (medians: pipe through benchstat)
	$(GO) test $(BENCHFLAGS) ./...
	cd $(SDK) && $(GO) test $(BENCHFLAGS) ./...

SCALE_COUNT ?= 3

bench-scale: build ## one process, 10, 100 and 1,000 rollouts in flight: CPU per rollout (proctor's, the machine's), peak RSS, phase p50 and p95
	PROCTOR_BENCH_SCALE=1 $(GO) test -run '^$$' -bench Scale -benchtime 1x -count $(SCALE_COUNT) -timeout 60m ./bench/scale

E2E_COUNT ?= 5

bench-e2e: fixture-images plugins warden ## 32 rollouts of hello-file against the docker-CLI baseline and the engine's floor, alternately
	PROCTOR_BENCH_E2E=1 PROCTOR_REQUIRE_DOCKER=1 $(GO) test -run '^$$' -bench E2E -benchtime $(E2E_COUNT)x -count 1 -timeout 60m -v ./cmd/proctor

lint: ## gofmt, go vet for linux and wasip1
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(SDK) && $(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./plugins/...
	cd $(SDK) && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...

demo: build base-image ## run the quickstart: fixture tasks with the oracle agent, then the report
	@# Exit code 1 means some rollouts ended as infra_error: the fixtures
	@# include a broken verifier on purpose, so the demo accepts it.
	@$(BIN) eval examples/quickstart.toml --out runs/quickstart; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 1 ]

clean: ## remove build outputs
	rm -rf bin $(BUNDLED)/*.wasm $(WARDEN)/warden-*
