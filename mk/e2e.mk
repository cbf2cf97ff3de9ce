# End-to-end test on real components (issue 4): etcd, kube-apiserver and a
# kubelet built from the Go module proxy (scripts/build-k8s.sh, cached under
# _output/k8s/bin), containerd with the flannel → bridge → stickyip chain,
# checkpointd. Needs root. Logs of every component: _output/e2e-logs/<test>/.
.PHONY: test-e2e e2e-deps
TEST_TIERS += test-e2e

E2E_TIMEOUT ?= 30m
E2E_RUN     ?= .

e2e-deps:
	scripts/install-deps.sh
	GO=$(GO) scripts/build-k8s.sh

# E2E_STRICT: a component that is missing fails the test instead of skipping it.
test-e2e: e2e-deps build
	E2E_STRICT=1 $(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -run '$(E2E_RUN)' -v ./test/e2e/
