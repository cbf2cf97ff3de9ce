# stickyip — build, install and test.
GO          ?= go
BIN         := bin
CNI_BIN_DIR ?= /opt/cni/bin
SBIN_DIR    ?= /usr/local/bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X github.com/stickyip/stickyip/contract.Version=$(VERSION)
# grpcnotrace: gRPC (checkpointd's CRI client) without golang.org/x/net/trace,
# whose html/template keeps every exported method of every type in the binary
# (reflection by method name): 6.3 MB of checkpointd with it, 1.9 without
# (test/bench/README.md). Only the binaries are built with it; the tests' compiles are
# unchanged.
GOTAGS      := grpcnotrace
GOBUILD     := CGO_ENABLED=0 $(GO) build -trimpath -tags $(GOTAGS) -ldflags '$(LDFLAGS)'

# Every go command make runs (vet, the tests of every tier, fuzzing) compiles
# as the binaries are built (no cgo, -trimpath), so all share one Go build
# cache: cgo changes package net and so every package above it, and the
# Kubernetes client libraries checkpointd and the tests use would otherwise
# compile twice. Measured with a cache filled by checkpointd's build alone:
# go vet ./checkpointd/... 107 s like this, 354 s with cgo. The scripts that
# need cgo (flanneld, CRI-O) set it themselves.
export CGO_ENABLED ?= 0
export GOFLAGS ?= -trimpath

.PHONY: all build build-stickyip install test test-all fuzz-smoke
all: build

# Test tiers beyond the unit tests register themselves here (mk/*.mk).
TEST_TIERS :=

build: build-stickyip

build-stickyip:
	$(GOBUILD) -o $(BIN)/stickyip ./plugins/ipam/stickyip

install: build
	install -d $(DESTDIR)$(CNI_BIN_DIR)
	install -m 0755 $(BIN)/stickyip $(DESTDIR)$(CNI_BIN_DIR)/stickyip

# Unit tests: no network, no real components. deploy/policycheck
# is a module of its own (the API server's admission code and CEL
# libraries, which the binaries must not build with): the placement
# policies run on Kubernetes 1.37's, and in deploy/policycheck/k136 on
# 1.36's. The vet of the tiers' tagged tests costs seconds once their
# packages are in the build cache.
#
# Strict mode (harness.StrictEnv) when run as root, as CI runs it: a unit
# test whose dependency is missing fails. A user who is not root runs the
# rest; the few unit tests that need root skip, each saying so.
test:
	$(GO) vet ./...
	$(GO) vet -tags e2e,integration,reliability ./test/...
	@[ "$$(id -u)" = 0 ] || echo "make test: not root: the unit tests that need root skip (go test -v shows which)"
	$(GO) test -count=1 ./...
	cd deploy/policycheck && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd deploy/policycheck/k136 && $(GO) vet ./... && $(GO) test -count=1 ./...

# Everything CI runs: unit tests, then every registered tier.
# Cheapest first: a broken build fails before the long end-to-end tier.
# The e2e tier's components (Kubernetes, etcd, flanneld) build in the
# background meanwhile (scripts/prebuild-e2e.sh; test-e2e waits for them),
# stopped when test-all ends.
TIER_ORDER := test-integration test-reliability test-e2e
test-all:
	@set -e; GO=$(GO) scripts/prebuild-e2e.sh start; trap 'scripts/prebuild-e2e.sh stop' EXIT; \
	echo "==> make test"; $(MAKE) --no-print-directory test; \
	for t in $(filter $(TEST_TIERS),$(TIER_ORDER)) $(filter-out $(TIER_ORDER),$(TEST_TIERS)); do echo "==> make $$t"; $(MAKE) --no-print-directory $$t; done

ifeq ($(shell id -u),0)
test: export STICKYIP_STRICT := 1
endif

# Tier-specific targets live in mk/*.mk.
-include mk/*.mk
