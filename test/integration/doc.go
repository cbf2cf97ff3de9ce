// Package integration holds stickyip's real-path tests (build tag
// `integration`, root only): cnitool and a private containerd drive the
// flannel → bridge → stickyip chain inside a network namespace made for the
// test, and the tests check what a user would see — pod IPs, CNI errors and the
// operator tool's output. Run them with `make test-integration`.
package integration
