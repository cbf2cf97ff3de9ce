# Real-path tests (issue 3): cnitool and a private containerd drive
# flannel → bridge → stickyip inside network namespaces the tests create.
# Needs root; installs containerd/runc/iptables (apt) and pinned CNI tools
# (into _output/) first. INTEGRATION_FLAGS=-v or '-run TestDualStack' narrows.
INTEGRATION_TIMEOUT ?= 10m
INTEGRATION_FLAGS   ?=

.PHONY: deps-integration test-integration
deps-integration:
	GO=$(GO) scripts/install-deps.sh

test-integration: build deps-integration
	$(GO) vet -tags integration ./test/...
	$(GO) test -tags integration -count=1 -timeout $(INTEGRATION_TIMEOUT) $(INTEGRATION_FLAGS) ./test/integration/...
TEST_TIERS += test-integration
