# gpucloud: the two commands that matter are `make run` (the whole stack on this machine) and
# `make test` (every test). Both install missing system packages first.
GO      ?= go
BIN     := bin
GOFLAGS ?=

.PHONY: all deps web-vendor build run test test-go test-c test-web generate check-generated check-binaries check-guest-layers vet fmt clean bench-api fuzz-short

all: build

deps:
	@./scripts/install-deps.sh

# The console's third-party browser files (xterm.js), installed by npm into web/static/vendor/.
web-vendor:
	@./scripts/web-vendor.sh

build: web-vendor
	$(GO) build -o $(BIN)/ ./cmd/...

run: deps web-vendor
	$(GO) run ./deploy/localstack

# Every test: Go packages (against real PostgreSQL and libvirt's test driver) and the C guest
# library's tests (against a gpuserverd on its simulated backend).
test: deps web-vendor vet check-generated check-binaries check-guest-layers
	$(GO) test -count=1 -timeout 20m ./...
	scripts/fuzz-short.sh

# Every fuzz target for FUZZTIME each (default 2s), as make test runs them.
fuzz-short:
	scripts/fuzz-short.sh

# The web console's end-to-end test in Debian's headless Chromium; npm ci installs the pinned
# Playwright client (never a browser). Screenshots land in web/e2e/artifacts/.
test-web: deps web-vendor
	cd web/e2e && npm ci --no-audit --no-fund
	$(GO) test -count=1 -run ConsoleEndToEnd -v ./web/

vet:
	$(GO) vet ./...

generate:
	$(GO) generate ./...

# Generated files must match their sources; CI fails when someone forgot `make generate`.
check-generated:
	@./scripts/check-generated.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

# Load benchmark of instance creates against a fresh local PostgreSQL + apiserver.
# Record results in docs/benchmarks/apiserver-creates.md.
BENCH_API_FLAGS ?= -c 16 -d 15s
bench-api:
	$(GO) run ./cmd/apiload -local $(BENCH_API_FLAGS)

clean:
	rm -rf $(BIN) .data

# The guest library's transport never calls up into its API files.
check-guest-layers:
	@./scripts/check-guest-layers.sh

# Build outputs never live in git; CI refuses a tracked ELF file.
check-binaries:
	@./scripts/check-no-binaries.sh
