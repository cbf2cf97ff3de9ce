// Package rebuild rebuilds the node's stickyip store when no CNI call can
// use it — damaged (reservation.ErrCorrupt: any damage the plugin refuses),
// or missing on a node that had one (reservation.ErrLost: the creation mark
// is there) — from what the node knows, so that neither a drain nor an
// operator is needed, and no address is ever held twice.
//
// Each reconcile pass asks Rebuilder.Pass. The cheap check is the plugin's
// own STATUS check (Health); a reader that failed (Suspect) makes the next
// pass read every record. A newer schema is not damage (installing that
// stickyip again reads it all) and is never rebuilt over.
//
// # Sources, and which wins
//
//   - the container runtime (CRI): every sandbox, ready or not; each one's
//     status (its primary addresses, its annotations, whether it uses the
//     host's network) and, from its verbose information, its network
//     namespace;
//   - the sandboxes' network namespaces: the addresses really configured
//     there, by interface (read when checkpointd may enter them: the
//     systemd unit; the static pod and DaemonSet lack CAP_SYS_ADMIN, and
//     the other sources stand in);
//   - the runtime's CNI result cache (contract.ReadCNICache): for each ADD
//     whose DEL has not succeeded, the network, interface, namespace,
//     CNI_ARGS, annotations and addresses;
//   - checkpointd's checkpoints: a saved pod's addresses;
//   - the node's own entries of its NodeRecord: the reservations of
//     deleted pods, with their end.
//
// MakePlan turns the node's own sources into ipam.Attachments, one per
// sandbox and network, ordered so that an address two sources show goes to
// the running sandbox: ready sandboxes whose namespace was read, then ready
// ones from their cached result or the runtime's status, then stopped ones
// whose DEL has not succeeded (their CNI result is still cached: the
// kubelet retries that DEL, which then leaves the reservation), then cached
// results of sandboxes the runtime does not list. Identities and
// reservation durations come from each ADD's own CNI_ARGS and annotations
// by the plugin's rules (ipam.Engine.Rebuild): nothing here decides an
// allocation. A running sandbox whose addresses no source shows (its status
// and namespace unreadable, no cached result) stops the rebuild: the node
// stays NotReady rather than risk handing out an address that sandbox
// holds. The runtime's list and the cache directory must be readable too.
//
// The new store is written beside the damaged one and renamed into place
// under the store's lock (boltstore.Store.Replace); the damaged file is
// kept under stickyip.db.damaged-<UTC time> and never written or removed.
//
// # When the API server is away
//
// The node's own sources are rebuilt at once: every address a sandbox
// holds, and the reservations the previous boot's sandboxes and the
// checkpoints leave. Only the NodeRecord is missing, and with it the
// reservations of pods deleted before the damage. Who could take those
// addresses meanwhile? No new pod reaches the node without the API server:
// only static pods (the operator's, and checkpointd's restored copies,
// which take their parent's addresses), and new sandboxes of pods the
// kubelet already runs, which take their own pod's address over. So the
// rebuilt store holds back every address no pod holds yet (ipam
// ErrRebuildWait, CNI error 11: the kubelet retries) until the record's
// reservations are in, or until the network's reservation.maxDuration has
// passed (no reservation can outlive that). The placement publisher does
// not publish a waiting store (Published): it would remove from the record
// the very entries the rebuild waits to read. An API server that answers
// but refuses the record (no placement manifests, no RBAC) ends the wait at
// once: there is no record to wait for.
package rebuild
