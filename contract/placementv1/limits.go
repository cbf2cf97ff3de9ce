package placementv1

// MaxEntries bounds a record's entries (the CRD's maxItems, and its
// status's claims): a node publishing more keeps its running pods' entries
// and its latest reservations, and counts the rest. At the longest every
// field can be, a record's spec and the controller's status of it stay
// under etcd's 1.5 MiB request limit (deploy's
// TestLargestRecordFitsWithItsStatus), so the verdicts of a full record
// can always be written.
const MaxEntries = 400

// MaxAddresses bounds an entry's addresses (one per range set).
const MaxAddresses = 8

// ProbeName is a NodeRecord name the stickyip-node-records policy refuses
// to everyone: a dry-run creation refused so shows the policy in effect.
const ProbeName = "stickyip-probe"
