// Package version holds the build version of the stickyip binaries.
package contract

// Version is set at link time by the Makefile (-X); "dev" for plain go builds.
var Version = "dev"
