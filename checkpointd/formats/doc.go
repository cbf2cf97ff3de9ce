// Package formats parses what other programs on the node write and
// checkpointd reads: the kubelet's configuration file (where its static pods
// live) and a container runtime's verbose sandbox status (a sandbox's
// network namespace and pause process). It needs nothing of the API or CRI
// clients, so that fuzzing its parsers instruments neither (a fuzz build
// instruments every package the target imports: the CRI client's gRPC
// would triple its build).
package formats
