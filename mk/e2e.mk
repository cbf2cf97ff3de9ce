# End-to-end test on real components: etcd and Kubernetes built
# from the Go module proxy (scripts/build-k8s.sh, cached under _output/k8s/),
# flanneld (scripts/build-flannel.sh, cached under _output/flannel/),
# containerd with the flannel → bridge → stickyip chain, checkpointd. Needs
# root. Logs of every component: _output/e2e-logs/<test>/.
#
# E2E_K8S selects the Kubernetes release: empty for the latest (1.37), 1.36
# for the previous one (kube-apiserver, kubelet and kube-controller-manager: the one-node
# scenarios and the placement adversary). test-e2e-k8s-1.36 runs the ground-floor scenarios and the
# placement policies (MutatingAdmissionPolicy is GA since 1.36) on 1.36; it
# is not a tier of test-all (its build alone is 3 to 9 minutes of CI's
# budget, by the host's speed, for what 1.37 shows too): run it before a release and when the policies change.
.PHONY: test-e2e e2e-deps test-e2e-k8s-1.36
TEST_TIERS += test-e2e

E2E_TIMEOUT ?= 30m
E2E_RUN     ?= .
E2E_K8S     ?=

e2e-deps:
	scripts/install-deps.sh
	GO=$(GO) E2E_K8S=$(E2E_K8S) scripts/build-k8s.sh
	GO=$(GO) scripts/build-flannel.sh

# scripts/run-e2e.sh compiles the tests once and runs them as three groups
# side by side (E2E_RUN: one process for the tests named); STICKYIP_STRICT (harness.StrictEnv): a component that is missing fails the test
# instead of skipping it.
test-e2e: e2e-deps build
	GO=$(GO) E2E_K8S=$(E2E_K8S) E2E_RUN='$(E2E_RUN)' E2E_TIMEOUT=$(E2E_TIMEOUT) scripts/run-e2e.sh

# The previous Kubernetes minor still works: its kubelet and kube-apiserver
# run the scenarios of smoke_test.go, and its API server admits deploy/placement
# (TestPlacement, applied without kubectl: 1.36 builds none) and holds against
# the adversary with its own garbage collector (TestPlacementAdversary), its
# install leaves no window (TestPlacementInstallWindow: the files applied
# as kubectl apply -f does, and the Helm chart), and a cluster on the former
# shared shards moves to NodeRecords by the documented steps
# (TestPlacementUpgrade).
test-e2e-k8s-1.36:
	$(MAKE) --no-print-directory test-e2e E2E_K8S=1.36 E2E_RUN='^(TestAPIPod.*|TestPlacement|TestPlacementAdversary|TestPlacementInstallWindow|TestPlacementUpgrade)$$$$'
