// Package placementv1 is the placement API (group stickyip.io, version v1)
// that checkpointd and stickyip-controller share, and the custom resource
// definition in deploy/placement describes, with the names of the index:
//
//   - NodeRecord, cluster-scoped, named after a node: in its spec, what the
//     node says it holds (one Entry per sticky identity), written only by
//     that node's checkpointd (the stickyip-node-records admission policy);
//     in its status, the controller's verdict on each entry (a Claim),
//     written only by stickyip-controller.
//   - the placement index (index.go): ConfigMaps of each namespace mapping
//     each identity to the node that holds it, written only by
//     stickyip-controller from the claims it accepted (the
//     stickyip-index-writer admission policy); the placement hint (a
//     MutatingAdmissionPolicy) looks a re-created pod's identity up there.
//
// No object of this API is written by two nodes.
package placementv1
