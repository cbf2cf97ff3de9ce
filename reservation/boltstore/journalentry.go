package boltstore

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/stickyip/stickyip/reservation"
)

// journalBase names the database an entry was made on.
type journalBase struct {
	Inode uint64
	Txid  uint64 // the last committed transaction
}

// journalEntry is one call's changes.
type journalEntry struct {
	Base journalBase
	Seq  uint32 // 1 for the first entry on Base
	Ops  []journalOp
}

// journalOp is one change of a network's records: a record put (its JSON,
// as the database stores it), an address deleted, or a bookkeeping value
// set.
type journalOp struct {
	Net  string
	Put  []byte
	Del  *netip.Addr
	Meta *[2]string

	rec *reservation.Record // Put, decoded and valid (decodeRecords)
}

// Op kinds in an encoded entry.
const (
	opPut  = 1
	opDel  = 2
	opMeta = 3
)

// encode returns the entry's payload: the base's inode and transaction,
// the number, the count of ops (little endian, 8, 8, 4, 4 bytes), then each
// op: its kind (1 byte), the network, and a record, an address or a key and
// value; strings and byte strings are a length (4 bytes) and the bytes.
// Written by hand rather than as JSON: a process decodes at most one
// entry, and would otherwise spend more on building the JSON decoders of
// these types than on the entry.
func (e journalEntry) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, e.Base.Inode)
	b = binary.LittleEndian.AppendUint64(b, e.Base.Txid)
	b = binary.LittleEndian.AppendUint32(b, e.Seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(e.Ops)))
	for _, op := range e.Ops {
		switch {
		case op.Del != nil:
			a, _ := op.Del.MarshalBinary()
			b = appendBytes(appendBytes(append(b, opDel), []byte(op.Net)), a)
		case op.Meta != nil:
			b = appendBytes(appendBytes(appendBytes(append(b, opMeta), []byte(op.Net)), []byte(op.Meta[0])), []byte(op.Meta[1]))
		default:
			b = appendBytes(appendBytes(append(b, opPut), []byte(op.Net)), op.Put)
		}
	}
	return b
}

func appendBytes(b, s []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(b, uint32(len(s))), s...)
}

var errShortEntry = errors.New("journal entry cut short")

// decodeRecords decodes and checks the records the entry puts: an entry
// whose record does not decode or is not valid does not count (it cannot
// have been written so; were it applied, every call would fail on it).
func (e journalEntry) decodeRecords() error {
	for i := range e.Ops {
		if e.Ops[i].Put == nil {
			continue
		}
		var r reservation.Record
		if err := decodeRecord(e.Ops[i].Put, &r); err != nil {
			return err
		}
		if err := r.Validate(); err != nil {
			return err
		}
		e.Ops[i].rec = &r
	}
	return nil
}

// decodeEntry decodes a payload made by encode.
func decodeEntry(p []byte) (journalEntry, error) {
	var e journalEntry
	if len(p) < 24 {
		return e, errShortEntry
	}
	e.Base = journalBase{Inode: binary.LittleEndian.Uint64(p), Txid: binary.LittleEndian.Uint64(p[8:])}
	e.Seq = binary.LittleEndian.Uint32(p[16:])
	n := int(binary.LittleEndian.Uint32(p[20:]))
	p = p[24:]
	for range n {
		if len(p) < 1 {
			return e, errShortEntry
		}
		kind := p[0]
		net, rest, err := cutBytes(p[1:])
		if err != nil {
			return e, err
		}
		op := journalOp{Net: string(net)}
		switch kind {
		case opPut:
			op.Put, rest, err = cutBytes(rest)
		case opDel:
			var a []byte
			if a, rest, err = cutBytes(rest); err == nil {
				var ip netip.Addr
				if err = ip.UnmarshalBinary(a); err == nil {
					op.Del = &ip
				}
			}
		case opMeta:
			var k, v []byte
			if k, rest, err = cutBytes(rest); err == nil {
				if v, rest, err = cutBytes(rest); err == nil {
					op.Meta = &[2]string{string(k), string(v)}
				}
			}
		default:
			err = errors.New("journal entry: unknown op")
		}
		if err != nil {
			return e, err
		}
		e.Ops = append(e.Ops, op)
		p = rest
	}
	if len(p) != 0 {
		return e, errors.New("journal entry: bytes after its ops")
	}
	return e, nil
}

// cutBytes splits a length-prefixed byte string off p.
func cutBytes(p []byte) (s, rest []byte, err error) {
	if len(p) < 4 {
		return nil, nil, errShortEntry
	}
	n := binary.LittleEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return nil, nil, errShortEntry
	}
	return p[4 : 4+n], p[4+n:], nil
}
