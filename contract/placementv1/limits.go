package placementv1

import "fmt"

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

// IndexLabel marks a PlacementIndex shard; the hint's binding selects its
// parameters by it. Its value is the shard's number.
const IndexLabel = "stickyip.io/index"

// ShardPrefix starts every shard's name.
const ShardPrefix = "index-"

// ShardBytes is how much of identities and node names the controller puts
// into one shard before it opens the next: a few thousand identities of
// the longest form, tens of thousands of short ones, well under etcd's
// request limit.
const ShardBytes = 768 << 10

// ShardName is the name of shard i.
func ShardName(i int) string { return fmt.Sprintf("%s%d", ShardPrefix, i) }

// ProbeName is a NodeRecord name the stickyip-node-records policy refuses
// to everyone: a dry-run creation refused so shows the policy in effect.
const ProbeName = "stickyip-probe"
