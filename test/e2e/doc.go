// Package e2e holds the end-to-end test of stickyip and checkpointd on real
// components: etcd, kube-apiserver and a kubelet built from the Go module
// proxy (scripts/build-k8s.sh), containerd with the project's CNI chain
// (flannel → bridge → stickyip), all started inside a network namespace the
// test creates as its "node".
//
// The tests are behind the build tag e2e and need root; run them with
// `make test-e2e`.
package e2e
