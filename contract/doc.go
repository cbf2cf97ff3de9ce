// Package contract is what the stickyip plugin, checkpointd and the pods on a
// node agree on: the annotation keys they read and write, the parsers of the
// values and files both binaries read (annotations, flannel's subnet.env,
// the runtime's CNI result cache), the defaults
// both use (paths, timeouts) and the build version.
// Keeping them in one place keeps the two binaries from drifting apart: a
// value checkpointd writes onto a restored pod is parsed by the plugin with
// the same function checkpointd validated it with.
//
// Errors of the annotation parsers wrap ErrInvalidAnnotation and name the
// key and the value; those of ParseFlannelLease wrap ErrInvalidFlannelLease.
package contract
