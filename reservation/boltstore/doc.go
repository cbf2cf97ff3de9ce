// Package boltstore keeps stickyip's records in a bbolt database on disk.
//
// One database per data directory, <dataDir>/stickyip.db, shared by every network
// that uses that directory. Processes serialise on a blocking flock of
// <dataDir>/stickyip.lock (bbolt's own lock polls every 50 ms, which would make
// concurrent plugin processes wait far longer than they need), then open the
// database for exactly one transaction and close it again, so the file is held
// only as long as one CNI call needs. Every Update commits with fsync.
//
// Bucket layout (schema 3; migrations.go holds the history, each step tested):
//
//	meta
//	└── schema                                   → uint64 big endian (3)
//	networks
//	└── <network name>
//	    ├── ips         <addr16>                              → Record (JSON)
//	    ├── containers  <containerID> 0 <ifname> 0 <addr16>   → ""
//	    ├── identities  <namespace> 0 <name> 0 <ifname> 0 <addr16> → ""
//	    ├── expiry      <unix nanos, 8 bytes BE> <addr16>     → ""  (reserved and cooling records)
//	    └── bookkeeping <key>                                  → value (boot ID, import mark, last address handed out, rebuild marks)
//
// A store of an older schema is migrated by the first transaction that opens
// it: a write migrates in its own transaction, a read first runs a write
// that only migrates.
//
// <addr16> is the 16-byte form of the address, so IPv4 and IPv6 keys sort
// numerically within their family and a cursor walks used addresses in order.
//
// A new database is initialised in a temporary file and renamed into place, so
// an existing empty or truncated stickyip.db is always damage: it is reported
// as reservation.ErrCorrupt and never touched.
//
// Beside the database, the data directory holds:
//
//	stickyip.lock                       the lock every process queues on
//	stickyip.created                    the creation mark (mark.go): written once a database exists;
//	                                    without stickyip.db it means the store was lost (reservation.ErrLost);
//	                                    without either, the witness (WithLostWitness) tells a new
//	                                    directory from one removed whole
//	stickyip.wait                       a new store held back (wait.go): without a database or a mark, none is
//	                                    created before the time it names (reservation.ErrAwaiting) while
//	                                    checkpointd reads what the cluster holds for a re-installed node
//	stickyip.db.damaged-<UTC time>      a damaged database kept by a rebuild (Replace), never written
//	stickyip.db.new, stickyip.db.rebuild  a new database being created or rebuilt (a leftover is replaced)
package boltstore
