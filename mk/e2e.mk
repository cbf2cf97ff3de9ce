# End-to-end test on real components (issue 4): etcd, kube-apiserver and a
# kubelet built from the Go module proxy (scripts/build-k8s.sh, cached under
# _output/k8s/bin), containerd with the flannel → bridge → stickyip chain,
# checkpointd. Needs root. Logs of every component: _output/e2e-logs/<test>/.
.PHONY: test-e2e e2e-deps
TEST_TIERS += test-e2e

E2E_TIMEOUT ?= 40m
E2E_RUN     ?= .
# The project's binaries, once their sources exist on this branch.
E2E_BUILD   := $(if $(wildcard plugins/ipam/stickyip/*.go),build)

e2e-deps:
	scripts/install-deps.sh
	GO=$(GO) scripts/build-k8s.sh

test-e2e: e2e-deps $(E2E_BUILD)
	$(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -run '$(E2E_RUN)' -v ./test/e2e/
