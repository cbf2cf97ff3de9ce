package boltstore

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/stickyip/stickyip/reservation"
)

// Check verifies the database: bbolt's own page consistency, then stickyip's
// invariants for every network — each record decodes, sits under its own
// address and is valid; every index entry points at a record that owns it and
// every record has its index entries; no sandbox or identity holds two
// addresses of one range set. It returns the problems found; an error means
// the database could not be read at all.
func (s *Store) Check() ([]string, error) {
	var problems []string
	err := s.view(func(tx *bolt.Tx) error {
		if tx == nil {
			return nil
		}
		for err := range tx.Check() {
			problems = append(problems, "bbolt: "+err.Error())
		}
		nets := tx.Bucket(bucketNetworks)
		if nets == nil {
			problems = append(problems, "bucket networks is missing")
			return nil
		}
		return nets.ForEachBucket(func(name []byte) error {
			t, err := openNetwork(tx, string(name), false)
			if err != nil {
				problems = append(problems, err.Error())
				return nil
			}
			for _, p := range checkNetwork(t) {
				problems = append(problems, fmt.Sprintf("network %s: %s", name, p))
			}
			return nil
		})
	})
	return problems, err
}

func checkNetwork(t *txn) []string {
	var problems []string
	want := map[string]bool{} // "bucket\x00key" of every index entry the records own
	holders := map[string]string{}
	_ = t.ips.ForEach(func(k, v []byte) error {
		r, err := decode(k, v)
		if err != nil {
			problems = append(problems, err.Error())
			return nil
		}
		if err := r.Validate(); err != nil {
			problems = append(problems, err.Error())
			return nil
		}
		for _, ik := range indexKeys(r) {
			want[bucketName(t, ik.b(t))+"\x00"+string(ik.key)] = true
		}
		if r.RangeSet >= 0 {
			var slots []string
			if r.State == reservation.Allocated {
				slots = append(slots, "container "+r.ContainerID+"/"+r.IfName)
			}
			if !r.Identity.IsZero() {
				slots = append(slots, "identity "+r.Identity.String())
			}
			for _, who := range slots {
				slot := fmt.Sprintf("%s in range set %d", who, r.RangeSet)
				if prev, dup := holders[slot]; dup {
					problems = append(problems, fmt.Sprintf("%s holds both %s and %s", slot, prev, r.IP))
				}
				holders[slot] = r.IP.String()
			}
		}
		return nil
	})
	for _, b := range []*bolt.Bucket{t.containers, t.identities, t.expiry} {
		name := bucketName(t, b)
		_ = b.ForEach(func(k, _ []byte) error {
			if !want[name+"\x00"+string(k)] {
				problems = append(problems, fmt.Sprintf("index %s has entry %q that no record owns", name, bytes.ReplaceAll(k, []byte{0}, []byte{'|'})))
			}
			delete(want, name+"\x00"+string(k))
			return nil
		})
	}
	for k := range want {
		name, key, _ := bytes.Cut([]byte(k), []byte{0})
		problems = append(problems, fmt.Sprintf("index %s lacks entry %q", name, bytes.ReplaceAll(key, []byte{0}, []byte{'|'})))
	}
	return problems
}

func bucketName(t *txn, b *bolt.Bucket) string {
	switch b {
	case t.containers:
		return string(bucketContainers)
	case t.identities:
		return string(bucketIdentities)
	case t.expiry:
		return string(bucketExpiry)
	}
	return "?"
}
