package boltstore

import (
	"net/netip"

	"github.com/stickyip/stickyip/reservation"
)

// recorder is a network's Txn that also records its changes as journal
// operations.
type recorder struct {
	reservation.Txn
	net string
	ops []journalOp
}

func (r *recorder) Put(rec *reservation.Record) error {
	if err := r.Txn.Put(rec); err != nil {
		return err
	}
	return r.put(rec)
}

func (r *recorder) put(rec *reservation.Record) error {
	v, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	r.ops = append(r.ops, journalOp{Net: r.net, Put: v})
	return nil
}

func (r *recorder) PutAll(rs []*reservation.Record) error {
	if err := r.Txn.PutAll(rs); err != nil {
		return err
	}
	for _, rec := range rs {
		if err := r.put(rec); err != nil {
			return err
		}
	}
	return nil
}

func (r *recorder) Delete(ip netip.Addr) error {
	if err := r.Txn.Delete(ip); err != nil {
		return err
	}
	r.ops = append(r.ops, journalOp{Net: r.net, Del: &ip})
	return nil
}

func (r *recorder) SetMeta(key, value string) error {
	if err := r.Txn.SetMeta(key, value); err != nil {
		return err
	}
	r.ops = append(r.ops, journalOp{Net: r.net, Meta: &[2]string{key, value}})
	return nil
}
