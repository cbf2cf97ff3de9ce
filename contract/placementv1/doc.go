// Package placementv1 is the placement API (group stickyip.io, version v1)
// that checkpointd and stickyip-controller share, and the custom resource
// definitions in deploy/placement describe:
//
//   - NodeRecord, cluster-scoped, named after a node: in its spec, what the
//     node says it holds (one Entry per sticky identity), written only by
//     that node's checkpointd (the stickyip-node-records admission policy);
//     in its status, the controller's verdict on each entry (a Claim),
//     written only by stickyip-controller.
//   - PlacementIndex, namespaced (index-0, index-1, …, labelled IndexLabel):
//     each identity of the namespace and the node that holds it, written only
//     by stickyip-controller from the claims it accepted; the placement hint
//     (a MutatingAdmissionPolicy) looks a re-created pod's identity up there.
//
// No object of this API is written by two nodes.
package placementv1
