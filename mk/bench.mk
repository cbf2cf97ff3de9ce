# Benchmarks: stickyip side by side with upstream host-local (issue 6).
# Not a test tier and not part of `make test`: run `make bench`.
# Figures go to stdout and to results/bench-<timestamp>.md (results/ is not committed).
BENCH_DIR           := $(CURDIR)/.cache/bench
BENCH_GOBIN         := $(BENCH_DIR)/bin
HOST_LOCAL_VERSION  := v1.9.1
HOST_LOCAL_PKG      := github.com/containernetworking/plugins/plugins/ipam/host-local
HOST_LOCAL_STAMP    := $(BENCH_GOBIN)/.host-local-$(HOST_LOCAL_VERSION)
# Extra driver flags, e.g. BENCH_FLAGS='-workloads 1,2 -n-empty 100'.
BENCH_FLAGS         ?=

.PHONY: bench bench-tools

# host-local, pinned, built the way bin/stickyip is (static, trimmed, stripped).
$(HOST_LOCAL_STAMP):
	CGO_ENABLED=0 GOBIN=$(BENCH_GOBIN) $(GO) install -trimpath -ldflags '-s -w' $(HOST_LOCAL_PKG)@$(HOST_LOCAL_VERSION)
	touch $@

# The CNI floor (workload 1): the smallest plugin on the CNI library's skel,
# built as bin/stickyip is.
bench-tools: $(HOST_LOCAL_STAMP)
	$(GO) build -o $(BENCH_GOBIN)/ipambench ./test/bench/cmd/ipambench
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BENCH_GOBIN)/cnifloor ./test/bench/cmd/cnifloor

# Workload 8 runs etcd, kube-apiserver and flanneld (e2e-deps builds them).
bench: build bench-tools e2e-deps
	$(BENCH_GOBIN)/ipambench -stickyip $(BIN)/stickyip -checkpointd $(BIN)/checkpointd -host-local $(BENCH_GOBIN)/host-local -cni-floor $(BENCH_GOBIN)/cnifloor \
		-work $(BENCH_DIR)/work -results results $(BENCH_FLAGS)

# The placement policy's cost at scale (issue 25): pod creations against a
# real kube-apiserver with deploy/placement applied, at 0, 1,000 and 10,000
# identities in one namespace, 50,000 across 100 and 30,000 in one of 70,000,
# for held, held-required, not-held and plain pods, the policy's binding in
# place and removed, side by side. Needs root and the e2e build
# (scripts/build-k8s.sh, run by e2e-deps). About 2 minutes warm.
.PHONY: bench-placement
bench-placement: e2e-deps build
	@mkdir -p results
	STICKYIP_STRICT=1 $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkPlacement(Admission|Burst)$$' -benchtime 1x \
		-timeout 40m -v ./test/e2e/ | tee results/bench-placement-$$(date -u +%Y%m%dT%H%M%SZ).txt

# stickyip-controller's cost at 5,000 nodes: the memory of its
# caches per pod and per record entry (150,000 pods, 5,000 records of 30
# entries) and the CPU of a claim verified and of an index rebuild, from a
# Go benchmark (no cluster). About 10 s.
.PHONY: bench-controller
bench-controller:
	@mkdir -p results
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkController$$' -benchtime 1x ./controller/manager/ | tee results/bench-controller-$$(date -u +%Y%m%dT%H%M%SZ).txt
