# Real-path tests: cnitool, a private containerd 2.3 and a
# private CRI-O drive flannel → bridge → stickyip (and the CNI 1.1.0 bridge
# conflist) inside network namespaces the tests create. Needs root; installs
# runc/iptables/conmon (apt) and builds containerd, CRI-O and the pinned CNI
# tools (into _output/) first. INTEGRATION_FLAGS=-v or '-run TestDualStack'
# narrows; STICKYIP_CONTAINERD=debian runs on Debian's containerd 1.6 (legacy).
INTEGRATION_TIMEOUT ?= 10m
INTEGRATION_FLAGS   ?=

.PHONY: deps-integration test-integration
deps-integration:
	GO=$(GO) scripts/install-deps.sh

# Strict mode (harness.StrictEnv): the tier installs what it needs first, so
# a test that finds a dependency missing fails instead of skipping.
test-integration: export STICKYIP_STRICT := 1
test-integration: build deps-integration
	$(GO) vet -tags integration ./test/...
	$(GO) test -tags integration -count=1 -timeout $(INTEGRATION_TIMEOUT) $(INTEGRATION_FLAGS) ./test/integration/...
TEST_TIERS += test-integration
