# idemproxy — run `make help` for the list of targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
# The repository is several modules (docs/modules.md): the root one and the
# nested ones go.work uses (.ci/modtidy -l lists them). vet, test and test-short
# run in each, on its own go.mod (.ci/each); binaries are built in the module of
# their main package, without the workspace, as a user's go build would.
EACH  := GO='$(GO)' ./.ci/each
NOWORK := GOWORK=off $(GO)
# Modules whose tests run at once (make test): most of their time is spent
# waiting on the servers and binaries they start.
TEST_JOBS ?= 2
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
IMAGE   ?= localhost/idemproxy:dev
LDFLAGS := -s -w -X github.com/idemproxy/idemproxy/proxy.Version=$(VERSION)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this list.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/idemproxy and bin/demoapi.
	$(NOWORK) build -C cmd/idemproxy -trimpath -ldflags '$(LDFLAGS)' -o $(CURDIR)/$(BIN)/idemproxy .
	$(NOWORK) build -trimpath -o $(BIN)/demoapi ./examples/demoapi

.PHONY: caddy
caddy: ## Build bin/caddy: Caddy with the standard modules and the idempotency module.
	$(NOWORK) build -C examples/caddy -trimpath -o $(CURDIR)/$(BIN)/caddy .

.PHONY: soak
soak: build caddy ## Fault-injection soak (3 instances + Redis; Sentinel failovers; Caddy reloads and SIGHUPs with changed store settings; PostgreSQL restarts; SIGKILLs with and without reconcile) and the bad-input campaign (SOAK_DURATION, default 60s).
	$(NOWORK) build -C test -o $(CURDIR)/$(BIN)/soak ./soak
	$(BIN)/soak -bin $(BIN)/idemproxy -caddy $(BIN)/caddy

.PHONY: bench
bench: build caddy ## Load benchmark: idemproxy vs a bare Go proxy vs Caddy, interleaved; prints ratios and CPU per request (~5 min). BENCH_ARGS='-peer NAME=BINARY' runs another proxy beside it, '-build NAME=BINARY' an older idemproxy build on every store (test/bench/peers).
	$(NOWORK) build -C test -o $(CURDIR)/$(BIN)/bench ./bench
	taskset -c 0 $(BIN)/bench -bin $(BIN) $(BENCH_ARGS)

.PHONY: bench-micro
bench-micro: ## Every Go micro-benchmark (Benchmark* in any package of any module, found in the code; the stores' start their own servers): allocs/op, bytes/record.
	pkgs=$$(GO='$(GO)' ./.ci/testfuncs Benchmark | cut -d' ' -f1 | sort -u) && [ -n "$$pkgs" ] && \
	$(GO) test -run '^$$' -bench . -benchmem $$pkgs

.PHONY: vet
vet: ## go vet in every module, gofmt, every go.mod tidy and in go.work and versions.yaml (.ci/release check), nothing built committed (.ci/builtcheck), the core (middleware, cache) importing no Caddy, zap, Prometheus or OpenTelemetry, and a program using middleware + memstore + redisstore getting none of Caddy, AWS, pgx, OpenTelemetry, Prometheus, gRPC (.ci/depcheck).
	$(EACH) $(GO) vet ./...
	GO='$(GO)' ./.ci/modtidy -check
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	@bad=$$($(GO) list -deps github.com/idemproxy/idemproxy/middleware/... github.com/idemproxy/idemproxy/cache/... | grep -E 'caddyserver|go.uber.org/zap|prometheus|go.opentelemetry.io' || true); \
	if [ -n "$$bad" ]; then echo "the core must not import these:"; echo "$$bad"; exit 1; fi
	GO='$(GO)' ./.ci/depcheck
	GO='$(GO)' ./.ci/release check
	GO='$(GO)' ./.ci/builtcheck
	@echo "vet: ok (core free of Caddy, zap, Prometheus and OpenTelemetry; a middleware user's modules free of the heavy ones)"

.PHONY: tidy
tidy: ## go mod tidy in every module, with a replace directive for each of the repository's modules it needs (.ci/modtidy).
	GO='$(GO)' ./.ci/modtidy

.PHONY: test
test: ## Run every test of every module with the race detector (starts its own redis-server, PostgreSQL and DynamoDB Local instances), examples/frameworks (chi, gin, echo) included; TEST_JOBS modules at once (default 2).
	$(EACH) -j $(TEST_JOBS) $(GO) test -race -count=1 -timeout 10m ./...

.PHONY: test-short
test-short: ## Quick tests of every module: no Redis Cluster, no end-to-end binaries.
	$(EACH) $(GO) test -short -count=1 ./...

.PHONY: fuzz
fuzz: ## Fuzz every Fuzz* target in the package that holds it, found in the code (.ci/fuzz -l lists them); FUZZTIME each (default 30s), FUZZ=Name,… for some (an unknown name fails).
	FUZZTIME=$(or $(FUZZTIME),30s) FUZZ='$(FUZZ)' GO='$(GO)' ./.ci/fuzz

.PHONY: demo
demo: build ## Run the proxy (memory store; DEMO_STORE=redis://… or postgres://… for another) in front of the demo API, show replay/409/422, keep running; DEMO_API_PORT, DEMO_PROXY_PORT, DEMO_ADMIN_PORT move it off 3000, 8080, 9090.
	@./examples/demo.sh

.PHONY: demo-check
demo-check: build ## Run the demo tour once and exit (used by CI).
	@DEMO_ONCE=1 DEMO_API_PORT=3901 DEMO_PROXY_PORT=3902 DEMO_ADMIN_PORT=3903 ./examples/demo.sh > /tmp/idemproxy-demo-check.out 2>&1 || { cat /tmp/idemproxy-demo-check.out; exit 1; }
	@grep -q 'Idempotent-Replayed: true' /tmp/idemproxy-demo-check.out && grep -q 'HTTP/1.1 409' /tmp/idemproxy-demo-check.out \
	  && grep -q 'HTTP/1.1 422' /tmp/idemproxy-demo-check.out && grep -q '"count":2' /tmp/idemproxy-demo-check.out \
	  && grep -q 'HTTP/1.1 401' /tmp/idemproxy-demo-check.out && grep -q '"deliveries":1' /tmp/idemproxy-demo-check.out \
	  || { cat /tmp/idemproxy-demo-check.out; echo "demo-check: the tour did not show a replay, a 409, a 422, two charges, and a webhook run once with a forged one refused"; exit 1; }
	@echo "demo-check: ok"

.PHONY: image
image: ## Build the container image from the Dockerfile with buildah, no daemon (root; IMAGE=localhost/idemproxy:dev). Not part of ci.
	./.ci/image $(IMAGE)

.PHONY: image-check
image-check: ## Build the image, run it (buildah run, chroot) in front of the demo API, probe /healthz and /readyz, and see a retry replayed.
	./.ci/image check $(IMAGE)

.PHONY: rules
rules: ## Check the Prometheus alert rules in examples/prometheus (promtool check rules, promtool test rules).
	@command -v promtool >/dev/null || { echo "promtool is missing: apt-get install -y prometheus"; exit 1; }
	cd examples/prometheus && promtool check rules idemproxy-rules.yml && promtool test rules idemproxy-rules.test.yml

.PHONY: release-rehearsal
release-rehearsal: ## Cut release VERSION of every module in versions.yaml (a release commit with no replace directives, a module proxy directory) in OUT, then install it as users do: go install, xcaddy build, go get (.ci/release; ~4 min).
	@[ -n "$(OUT)" ] || { echo "usage: make release-rehearsal VERSION=v0.1.0 OUT=DIR"; exit 2; }
	GO='$(GO)' ./.ci/release rehearse $(VERSION) $(OUT)

.PHONY: ci
ci: vet build rules test demo-check soak ## Everything CI runs, and a release rehearsal at v0.1.0 (in REHEARSAL_OUT, kept; by default a temporary directory, removed when it passes).
	@if [ -n "$(REHEARSAL_OUT)" ]; then $(MAKE) release-rehearsal VERSION=v0.1.0 OUT=$(REHEARSAL_OUT); else \
	  out=$$(mktemp -d /tmp/idemproxy-release.XXXXXX) && $(MAKE) release-rehearsal VERSION=v0.1.0 OUT=$$out && \
	  { git worktree remove --force $$out/src; chmod -R u+w $$out; rm -rf $$out; echo "release: $$out removed (about 1.3 GB: set REHEARSAL_OUT to keep it)"; }; fi

.PHONY: clean
clean: ## Remove build output.
	rm -rf $(BIN)
