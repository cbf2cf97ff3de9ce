// Package reliability holds the suites that run the real stickyip plugin binary
// as separate processes: many at once (concurrency), killed with SIGKILL at random
// moments (crash), against damaged or hostile store files (corruption), and with
// malformed input (bad input). They print figures and assert what a node operator
// would notice: IPs handed out, CNI error codes and messages, and the operator
// tool's verdict on the store.
//
// The suites are behind the build tag "reliability" and need a built plugin:
//
//	make test-reliability
//
// or, by hand, `make build && go test -tags reliability -v ./test/reliability/`.
// STICKYIP_BIN overrides the binary path (default: bin/stickyip at the repository
// root). Cases that need root (network namespaces, tmpfs and read-only mounts) skip
// with a message when not run as root.
package reliability
