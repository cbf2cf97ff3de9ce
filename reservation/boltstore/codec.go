package boltstore

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/stickyip/stickyip/reservation"
)

// A record is stored as the JSON encoding/json gives reservation.Record.
// encodeRecord and decodeRecord write and read that form without reflection:
// encoding/json's first use of a type in a process builds its field tables
// (a quarter of a millisecond for Record, in every CNI call: each is a new
// process), and a /16 import encodes 65,000 records. encodeRecord's bytes
// are json.Marshal's; decodeRecord reads what it writes and hands anything
// else (another key, an escape, null) to json.Unmarshal, so a record any
// earlier stickyip wrote reads as before. FuzzRecordCodec holds both to
// encoding/json.

// encodeRecord returns json.Marshal(r).
func encodeRecord(r *reservation.Record) ([]byte, error) {
	b := make([]byte, 0, 320)
	b = append(b, `{"ip":`...)
	ip, err := r.IP.MarshalText()
	if err != nil {
		return nil, err
	}
	b = appendString(b, string(ip))
	b = append(b, `,"rangeSet":`...)
	b = strconv.AppendInt(b, int64(r.RangeSet), 10)
	b = append(b, `,"state":`...)
	b = appendString(b, string(r.State))
	b = appendField(b, "containerID", r.ContainerID)
	b = appendField(b, "ifname", r.IfName)
	b = appendField(b, "netns", r.Netns)
	b = appendField(b, "bootID", r.BootID)
	b = appendIdentity(b, "identity", r.Identity)
	b = appendField(b, "uid", r.UID)
	b = appendField(b, "podName", r.PodName)
	b = appendInt(b, "duration", int64(r.Duration))
	b = appendInt(b, "requestedDuration", int64(r.RequestedDuration))
	b = appendBool(b, "clamped", r.Clamped)
	b = appendField(b, "durationFrom", r.DurationFrom)
	b = appendField(b, "retention", r.Retention)
	if r.StatefulSet != nil {
		if b, err = appendStatefulSet(b, "statefulSet", r.StatefulSet); err != nil {
			return nil, err
		}
	}
	if b, err = appendTime(b, "allocatedAt", r.AllocatedAt); err != nil {
		return nil, err
	}
	if !r.ReleasedAt.IsZero() {
		if b, err = appendTime(b, "releasedAt", r.ReleasedAt); err != nil {
			return nil, err
		}
	}
	if !r.ExpiresAt.IsZero() {
		if b, err = appendTime(b, "expiresAt", r.ExpiresAt); err != nil {
			return nil, err
		}
	}
	b = appendField(b, "lastContainerID", r.LastContainerID)
	b = appendIdentity(b, "lastIdentity", r.LastIdentity)
	b = appendBool(b, "imported", r.Imported)
	b = appendField(b, "importedFrom", r.ImportedFrom)
	return append(b, '}'), nil
}

// appendField appends ,"key":"s" unless s is empty (omitempty).
func appendField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	b = appendKey(b, key)
	return appendString(b, s)
}

func appendInt(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(appendKey(b, key), n, 10)
}

func appendBool(b []byte, key string, v bool) []byte {
	if !v {
		return b
	}
	return append(appendKey(b, key), "true"...)
}

func appendKey(b []byte, key string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendIdentity appends an identity unless it IsZero (omitzero).
func appendIdentity(b []byte, key string, id reservation.Identity) []byte {
	if id.IsZero() {
		return b
	}
	b = appendKey(b, key)
	n := len(b)
	b = append(b, '{')
	b = appendField(b, "namespace", id.Namespace)
	b = appendField(b, "name", id.Name)
	b = appendField(b, "ifname", id.IfName)
	b = appendBool(b, "legacy", id.Legacy)
	if len(b) > n+1 {
		b = append(b[:n+1], b[n+2:]...) // the first field's comma
	}
	return append(b, '}')
}

// appendStatefulSet appends a StatefulSetRef, its name always (no
// omitempty), the rest when set.
func appendStatefulSet(b []byte, key string, w *reservation.StatefulSetRef) ([]byte, error) {
	b = append(appendKey(b, key), `{"name":`...)
	b = appendString(b, w.Name)
	b = appendField(b, "uid", w.UID)
	b = appendField(b, "whenScaled", w.WhenScaled)
	b = appendField(b, "whenDeleted", w.WhenDeleted)
	if !w.EndedAt.IsZero() {
		var err error
		if b, err = appendTime(b, "endedAt", w.EndedAt); err != nil {
			return nil, err
		}
	}
	b = appendField(b, "movedTo", w.MovedTo)
	b = appendField(b, "why", w.Why)
	return append(b, '}'), nil
}

func appendTime(b []byte, key string, t time.Time) ([]byte, error) {
	v, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return append(appendKey(b, key), v...), nil
}

// appendString appends s as a JSON string. Printable ASCII that
// encoding/json writes as it is goes straight in; anything else is left to
// encoding/json, whose escapes (HTML characters, control characters,
// invalid UTF-8, U+2028) it must match.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodeRecord sets r from v, as json.Unmarshal(v, r) does.
func decodeRecord(v []byte, r *reservation.Record) error {
	var fast reservation.Record
	if (&recordReader{p: v}).record(&fast) {
		*r = fast
		return nil
	}
	return json.Unmarshal(v, r)
}

// recordReader reads the compact form encodeRecord writes: one object, the
// keys of reservation.Record in any order, strings without escapes, whole
// numbers. Anything else is not read (false), not guessed at.
type recordReader struct {
	p []byte
	i int
}

func (d *recordReader) record(r *reservation.Record) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "ip":
			s, ok := d.str()
			return ok && r.IP.UnmarshalText(s) == nil
		case "rangeSet":
			n, ok := d.int()
			r.RangeSet = int(n)
			return ok && int64(r.RangeSet) == n
		case "state":
			s, ok := d.str()
			r.State = reservation.State(s)
			return ok
		case "containerID":
			return d.strTo(&r.ContainerID)
		case "ifname":
			return d.strTo(&r.IfName)
		case "netns":
			return d.strTo(&r.Netns)
		case "bootID":
			return d.strTo(&r.BootID)
		case "identity":
			return d.identity(&r.Identity)
		case "uid":
			return d.strTo(&r.UID)
		case "podName":
			return d.strTo(&r.PodName)
		case "duration":
			n, ok := d.int()
			r.Duration = time.Duration(n)
			return ok
		case "requestedDuration":
			n, ok := d.int()
			r.RequestedDuration = time.Duration(n)
			return ok
		case "clamped":
			return d.boolTo(&r.Clamped)
		case "durationFrom":
			return d.strTo(&r.DurationFrom)
		case "retention":
			return d.strTo(&r.Retention)
		case "statefulSet":
			if r.StatefulSet == nil { // a key given twice merges, as json.Unmarshal does
				r.StatefulSet = &reservation.StatefulSetRef{}
			}
			return d.statefulSet(r.StatefulSet)
		case "allocatedAt":
			return d.timeTo(&r.AllocatedAt)
		case "releasedAt":
			return d.timeTo(&r.ReleasedAt)
		case "expiresAt":
			return d.timeTo(&r.ExpiresAt)
		case "lastContainerID":
			return d.strTo(&r.LastContainerID)
		case "lastIdentity":
			return d.identity(&r.LastIdentity)
		case "imported":
			return d.boolTo(&r.Imported)
		case "importedFrom":
			return d.strTo(&r.ImportedFrom)
		}
		return false
	}) && d.i == len(d.p)
}

func (d *recordReader) identity(id *reservation.Identity) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "namespace":
			return d.strTo(&id.Namespace)
		case "name":
			return d.strTo(&id.Name)
		case "ifname":
			return d.strTo(&id.IfName)
		case "legacy":
			return d.boolTo(&id.Legacy)
		}
		return false
	})
}

func (d *recordReader) statefulSet(w *reservation.StatefulSetRef) bool {
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "name":
			return d.strTo(&w.Name)
		case "uid":
			return d.strTo(&w.UID)
		case "whenScaled":
			return d.strTo(&w.WhenScaled)
		case "whenDeleted":
			return d.strTo(&w.WhenDeleted)
		case "endedAt":
			return d.timeTo(&w.EndedAt)
		case "movedTo":
			return d.strTo(&w.MovedTo)
		case "why":
			return d.strTo(&w.Why)
		}
		return false
	})
}

// object reads {"key":value,...}, each value by field.
func (d *recordReader) object(field func(key []byte) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	for {
		key, ok := d.str()
		if !ok || !d.byte(':') || !field(key) {
			return false
		}
		if d.byte('}') {
			return true
		}
		if !d.byte(',') {
			return false
		}
	}
}

func (d *recordReader) byte(c byte) bool {
	if d.i < len(d.p) && d.p[d.i] == c {
		d.i++
		return true
	}
	return false
}

// str reads a string without escapes, of valid UTF-8 without control
// characters (json.Unmarshal would replace what is not valid UTF-8).
func (d *recordReader) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	end := bytes.IndexByte(d.p[d.i:], '"')
	if end < 0 {
		return nil, false
	}
	s := d.p[d.i : d.i+end]
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
	}
	if !utf8.Valid(s) {
		return nil, false
	}
	d.i += end + 1
	return s, true
}

func (d *recordReader) strTo(dst *string) bool {
	s, ok := d.str()
	*dst = string(s)
	return ok
}

func (d *recordReader) boolTo(dst *bool) bool {
	switch {
	case bytes.HasPrefix(d.p[d.i:], []byte("true")):
		*dst, d.i = true, d.i+4
	case bytes.HasPrefix(d.p[d.i:], []byte("false")):
		*dst, d.i = false, d.i+5
	default:
		return false
	}
	return true
}

// int reads a whole number as JSON writes one: an optional minus, no
// leading zero, no fraction or exponent.
func (d *recordReader) int() (int64, bool) {
	start := d.i
	if d.i < len(d.p) && d.p[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.p) && d.p[d.i] >= '0' && d.p[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.p[digits] == '0' && d.i > digits+1) {
		return 0, false
	}
	if d.i < len(d.p) && (d.p[d.i] == '.' || d.p[d.i] == 'e' || d.p[d.i] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(d.p[start:d.i]), 10, 64)
	return n, err == nil
}

func (d *recordReader) timeTo(t *time.Time) bool {
	start := d.i
	if _, ok := d.str(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.p[start:d.i]) == nil
}
