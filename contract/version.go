package contract

// Version is the build version of both binaries, set at link time by the
// Makefile (-X github.com/stickyip/stickyip/contract.Version=...); "dev"
// for plain go builds.
var Version = "dev"
