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

# The placement index at scale: BenchmarkPlacementAdmission (pod creations
# against a real kube-apiserver of each minor with deploy/placement, the
# PlacementIndex shards written as stickyip-controller writes them, at 0,
# 1,000, 10,000 and 30,000 identities in a namespace, short ones and
# 253-character ones, up to 90,000 in the cluster; held, held-required,
# not-held, plain and the opt-in's pods, the hint's bindings in place and
# removed, side by side) and BenchmarkPlacementBurst (one checkpointd
# publisher per node with its own credentials and the real
# stickyip-controller, all started at once: 50 x 10, 1 x 110, 100 x 50
# claims; time to the index, requests per claim from the audit log). Needs
# root and the e2e build of both minors (scripts/build-k8s.sh, run by
# e2e-deps; 1.36's by E2E_K8S=1.36 make e2e-deps). About 25 minutes warm on
# 2 cores.
.PHONY: bench-placement
bench-placement: e2e-deps build
	@mkdir -p results
	STICKYIP_STRICT=1 $(GO) test -tags e2e -count=1 -run '^$$' -bench '^BenchmarkPlacement(Admission|Burst)$$' -benchtime 1x \
		-timeout 90m -v ./test/e2e/ | tee results/bench-placement-$$(date -u +%Y%m%dT%H%M%SZ).txt

# A node beside the cluster's StatefulSets (workload 9 of ipambench, not in
# make bench): the node of workload 8 with its own credentials,
# deploy/placement and stickyip-controller, 20,000 StatefulSets no node
# runs, their status patched for a minute between two quiet ones;
# checkpointd's CPU, memory, bytes received and requests (the audit log).
# About 6 minutes.
.PHONY: bench-statefulsets
bench-statefulsets: build bench-tools e2e-deps
	$(BENCH_GOBIN)/ipambench -plugins stickyip -workloads 9 -stickyip $(BIN)/stickyip -checkpointd $(BIN)/checkpointd \
		-controller $(BIN)/stickyip-controller -work $(BENCH_DIR)/work -results results $(BENCH_FLAGS)

# stickyip-controller's cost at 5,000 nodes: the memory of its
# caches per pod, StatefulSet, Node and record entry (150,000 pods, 20,000
# StatefulSets, 5,000 records of 30 entries) and the CPU of a claim
# verified, of an index rebuild, and of a pod's and a StatefulSet's watch
# event with the pass it causes, from a Go benchmark (no cluster). About
# 15 s.
.PHONY: bench-controller
bench-controller:
	@mkdir -p results
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkController$$' -benchtime 1x ./controller/manager/ | tee results/bench-controller-$$(date -u +%Y%m%dT%H%M%SZ).txt
