// Package contract is what the stickyip plugin, checkpointd and the pods on a
// node agree on: the annotation keys they read and write, the parsers of the
// values both binaries read, and the defaults both use (paths, timeouts).
// Keeping them in one place keeps the two binaries from drifting apart: a
// value checkpointd writes onto a restored pod is parsed by the plugin with
// the same function checkpointd validated it with.
//
// Errors of the parsers wrap ErrInvalidAnnotation (or ErrInvalidValue for
// values that are not annotations) and name the key and the value.
package contract
