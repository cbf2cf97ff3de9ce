// Package placement publishes the node's sticky identities in its own
// NodeRecord (contract/placementv1), with the node's own credentials: one
// entry per identity the node holds an address for (an allocation whose
// pod has a reservation duration, or a live reservation). No other node
// writes that object, and the node writes no other: stickyip-controller
// checks each entry against the pod and alone builds the namespaces'
// placement index, which the stickyip-placement MutatingAdmissionPolicy
// reads to send a re-created pod back to the node that holds its IP.
//
// A Publisher compares what the IPAM store implies (Desired) with the
// record's spec and writes the difference as one JSON merge patch of the
// spec, with no precondition: nobody else writes the spec, so nothing
// conflicts. A Watcher follows the record (one watch, by its name) for the
// controller's verdicts in its status: which claims count, which other
// node claimed an identity later, and how each StatefulSet pod's
// reservation ends (package retention applies them). Nothing on the node
// waits for the API server.
package placement

// FieldManager is the field manager of the node's writes.
const FieldManager = "stickyip-placement"
