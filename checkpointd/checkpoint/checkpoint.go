// Package checkpoint stores checkpointd's saved pods on local disk: pod
// identities and the file names derived from them (id.go), records and
// their format (record.go), the store (store.go), absence marks (absent.go)
// and clean-up (purge.go). Files are written with checkpointd/safefile.
//
// Layout of the checkpoint directory (created 0700, root only: records may hold
// secret data):
//
//	<dir>/
//	├── <namespace>_<name>.ckpt     one record per pod identity
//	├── <namespace>_<name>.absent   since when the API server has said the parent is gone (RFC 3339)
//	├── .<namespace>_<name>.ckpt.*  temporary files of an interrupted write (ignored, swept)
//	└── corrupt/                     records that failed verification, set aside
//	    └── <namespace>_<name>.ckpt.<unix-nanos>
//
// A record file is one header line followed by the payload:
//
//	{"format":"stickyip.io/checkpoint/v1","length":1234,"sha256":"<hex>"}\n
//	<payload: JSON of Record, exactly length bytes>
//
// Writes are atomic (safefile.Write), so a crash at any point leaves either
// the old or the new record. A record whose header,
// length or checksum does not match is never returned as valid: List reports
// it and moves it into corrupt/ (it is never deleted), so an operator can
// inspect it.
//
// Namespaces and pod names cannot contain '_', so the file name maps back to
// exactly one identity.
package checkpoint
