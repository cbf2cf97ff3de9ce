package boltstore

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// checkEncode fails unless encodeRecord(r) is json.Marshal(r), and the
// record reads back (decodeRecord, the fast path itself) as json.Unmarshal
// reads it.
func checkEncode(t *testing.T, r *reservation.Record) {
	t.Helper()
	want, wantErr := json.Marshal(r)
	got, err := encodeRecord(r)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("encodeRecord error %v, json.Marshal error %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encodeRecord:\n%s\njson.Marshal:\n%s", got, want)
	}
	checkDecode(t, got)
}

// checkDecode fails unless decodeRecord reads v as json.Unmarshal does, and
// fails where it fails.
func checkDecode(t *testing.T, v []byte) {
	t.Helper()
	var got, want reservation.Record
	err := decodeRecord(v, &got)
	wantErr := json.Unmarshal(v, &want)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decodeRecord(%q) error %v, json.Unmarshal error %v", v, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeRecord(%q):\n%+v\njson.Unmarshal:\n%+v", v, got, want)
	}
	var fast reservation.Record
	if (&recordReader{p: v}).record(&fast) && !reflect.DeepEqual(fast, want) {
		t.Fatalf("fast path read %q as\n%+v\njson.Unmarshal:\n%+v", v, fast, want)
	}
}

func codecRecords() []*reservation.Record {
	at := time.Date(2026, 11, 27, 23, 4, 5, 123456789, time.UTC)
	id := reservation.Identity{Namespace: "db", Name: "etcd-0", IfName: "eth0"}
	return []*reservation.Record{
		{IP: netip.MustParseAddr("10.244.1.7"), State: reservation.Allocated, ContainerID: "0123abcd", IfName: "eth0",
			Netns: "/var/run/netns/cni-1", BootID: "b-1", Identity: id, UID: "u-1", PodName: "etcd-0", Duration: 10 * time.Minute,
			RequestedDuration: time.Hour, Clamped: true, DurationFrom: "namespace", AllocatedAt: at},
		{IP: netip.MustParseAddr("fd00::1:7"), RangeSet: 1, State: reservation.Reserved, Identity: reservation.Identity{Namespace: "db", Name: "k", Legacy: true},
			Duration: time.Minute, AllocatedAt: at, ReleasedAt: at.Add(time.Hour), ExpiresAt: at.Add(2 * time.Hour), LastContainerID: "c0"},
		{IP: netip.MustParseAddr("10.99.0.2"), RangeSet: -1, State: reservation.Allocated, ContainerID: "e3caba85", IfName: "eth0",
			BootID: "b", AllocatedAt: at.In(time.FixedZone("x", 3600)), Imported: true, ImportedFrom: "/var/lib/cni/networks/cbr0/10.99.0.2"},
		{IP: netip.MustParseAddr("10.0.0.9"), State: reservation.Cooling, AllocatedAt: at, ReleasedAt: at, ExpiresAt: at.Add(30 * time.Second),
			LastIdentity: id},
		{IP: netip.MustParseAddr("fe80::1%eth<0>&\"x"), State: "odd <state> \u2028 é \x01", ContainerID: "a\\b\"c", PodName: "p\xff",
			Identity: reservation.Identity{Namespace: "only-namespace"}, AllocatedAt: at},
		{IP: netip.MustParseAddr("10.0.0.8"), State: "a<b", ContainerID: "a>b", IfName: "a&b", Netns: "tab\there", BootID: "\u2028",
			PodName: "del\x7f", UID: "é", AllocatedAt: at}, // one escape each, as json.Marshal writes it
		{State: reservation.Allocated, AllocatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, // json.Marshal fails: so must encodeRecord
	}
}

func TestRecordCodec(t *testing.T) {
	for i, r := range codecRecords() {
		checkEncode(t, r)
		// What stickyip writes, it reads without encoding/json (the
		// point of the codec): every record but the odd ones.
		if v, err := encodeRecord(r); i < 4 && (err != nil || !(&recordReader{p: v}).record(&reservation.Record{})) {
			t.Errorf("record %d (%s) is not read by the fast path: %v", i, v, err)
		}
	}
	for _, v := range []string{
		`{"ip":"10.0.0.1","rangeSet":0,"state":"allocated","allocatedAt":"2026-01-01T00:00:00Z"}`,
		`{"state":"reserved","ip":"10.0.0.1","identity":{"name":"a"},"identity":{"namespace":"n"}}`, // keys in any order, repeated
		`{"ip":"10.0.0.1","rangeSet":01}`, `{"ip":"10.0.0.1","rangeSet":1.5}`, `{"rangeSet":-0}`, `{"rangeSet":9223372036854775808}`,
		`{"ip":"10.0.0.1","containerID":"a\u0041"}`, `{"ip":"10.0.0.1", "state":"allocated"}`, `{"IP":"10.0.0.1"}`, `{"ip":null}`,
		`{"ip":"10.0.0.1","someday":"a field of a later stickyip"}`, `{"clamped":truex}`, `{"clamped":true} `, `{}`, `{"ip":"10.0.0.300"}`,
		`{"allocatedAt":"2026-13-01T00:00:00Z"}`, `{"duration":1e9}`, `[]`, ``, `{"ip":"10.0.0.1",}`, `{"identity":{"legacy":false,"ifname":"x"}}`,
		"{\"containerID\":\"a\xffb\"}", "{\"containerID\":\"a\tb\"}", `{"ip":"10.0.0.1","uid":"é"}`,
	} {
		checkDecode(t, []byte(v))
	}
}

// TestAppendString: a string is written as json.Marshal writes it, every
// byte alone and between plain ones (the plain ones straight, the others
// as encoding/json escapes them).
func TestAppendString(t *testing.T) {
	for c := range 256 {
		for _, s := range []string{string([]byte{byte(c)}), "a" + string([]byte{byte(c)}) + "b"} {
			want, _ := json.Marshal(s)
			if got := appendString([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
				t.Fatalf("appendString(%q) = %s, json.Marshal %s", s, got[1:], want)
			}
		}
	}
}

// TestFastPathReads: what the fast path must read itself (the point of
// the codec: no encoding/json on a store's every read), as json.Unmarshal
// reads it: numbers with every digit, signs, strings with spaces or none
// at all, either boolean; and values cut short it must refuse, without
// reading past the end.
func TestFastPathReads(t *testing.T) {
	for _, v := range []string{
		`{"rangeSet":9}`, `{"rangeSet":-19}`, `{"rangeSet":0}`, `{"duration":1234567890}`, `{"requestedDuration":-5}`,
		`{"clamped":false}`, `{"clamped":true}`, `{"identity":{"legacy":false,"name":"a"}}`,
		`{"containerID":""}`, `{"containerID":"a b ~"}`, `{"podName":"é"}`,
	} {
		var fast, want reservation.Record
		if err := json.Unmarshal([]byte(v), &want); err != nil {
			t.Fatal(err)
		}
		if !(&recordReader{p: []byte(v)}).record(&fast) || !reflect.DeepEqual(fast, want) {
			t.Errorf("fast path on %s: %+v, want it read as %+v", v, fast, want)
		}
	}
	for _, v := range []string{`{"rangeSet":1`, `{"rangeSet":-`, `{"rangeSet":`, `{"duration":12`, `{"clamped":tru`, `{"clamped":fals`,
		`{"ip":"10.0.0.1`, `{"state":"`, `{"identity":{"name":"a"`, `{"ip":"10.0.0.1",`, `{`} {
		checkDecode(t, []byte(v))
	}
}

// TestRecordCodecEveryField fails when Record, or a struct it holds
// (Identity, as Identity and LastIdentity), gains a field the codec does
// not write or read: each field at every depth is set in turn, alone, and
// encodeRecord must still be json.Marshal and decodeRecord json.Unmarshal.
func TestRecordCodecEveryField(t *testing.T) {
	set := 0
	for _, path := range leafFields(t, reflect.TypeFor[reservation.Record](), nil) {
		// An Identity with no namespace or name is zero (omitted, by
		// json.Marshal as by the codec): each starts as one that is not,
		// so a field of its own set alone is written.
		base := reservation.Identity{Namespace: "ns", Name: "n"}
		r := &reservation.Record{Identity: base, LastIdentity: base}
		if path.name == "StatefulSet" || strings.HasPrefix(path.name, "StatefulSet.") {
			// A StatefulSetRef is written whole when the pointer is set, its
			// name always: each of its fields starts from one with a name.
			r.StatefulSet = &reservation.StatefulSetRef{Name: "db"}
		}
		f := reflect.ValueOf(r).Elem().FieldByIndex(path.index)
		switch v := f.Addr().Interface().(type) {
		case **reservation.StatefulSetRef:
			// set above: the pointer alone, every field of its own zero
		case *netip.Addr:
			*v = netip.MustParseAddr("10.1.2.3")
		case *time.Time:
			*v = time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC)
		default:
			switch f.Kind() {
			case reflect.String:
				f.SetString("v-" + path.name)
			case reflect.Int, reflect.Int64:
				f.SetInt(42)
			case reflect.Bool:
				f.SetBool(true)
			default:
				t.Fatalf("Record.%s has type %s, which this test (and the codec) does not know", path.name, f.Type())
			}
		}
		set++
		want, _ := json.Marshal(r)
		got, err := encodeRecord(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Record.%s alone: encodeRecord %s (%v), json.Marshal %s", path.name, got, err, want)
		}
		var back reservation.Record
		if err := decodeRecord(got, &back); err != nil || !reflect.DeepEqual(&back, r) {
			t.Fatalf("Record.%s alone: %s reads back as %+v (%v), want %+v", path.name, got, back, err, *r)
		}
		checkDecode(t, got)
	}
	t.Logf("%d fields, nested ones included", set)
}

// field is a field of Record at any depth: its index path and its dotted
// name.
type field struct {
	index []int
	name  string
}

// leafFields lists typ's fields, walking into its struct fields but for
// the two the codec writes as one value (an address, a time).
func leafFields(t *testing.T, typ reflect.Type, under []int) []field {
	t.Helper()
	var out []field
	for i := range typ.NumField() {
		sf := typ.Field(i)
		index := append(append([]int(nil), under...), i)
		if sf.Type == reflect.TypeFor[*reservation.StatefulSetRef]() {
			// The pointer alone, then each field of what it points to.
			out = append(out, field{index: index, name: sf.Name})
			for _, sub := range leafFields(t, sf.Type.Elem(), nil) {
				out = append(out, field{index: append(append([]int(nil), index...), sub.index...), name: sf.Name + "." + sub.name})
			}
			continue
		}
		if sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeFor[netip.Addr]() && sf.Type != reflect.TypeFor[time.Time]() {
			if sf.Type != reflect.TypeFor[reservation.Identity]() {
				t.Fatalf("%s has a struct field %s of type %s: set it up in TestRecordCodecEveryField", typ, sf.Name, sf.Type)
			}
			for _, sub := range leafFields(t, sf.Type, index) {
				out = append(out, field{index: sub.index, name: sf.Name + "." + sub.name})
			}
			continue
		}
		out = append(out, field{index: index, name: sf.Name})
	}
	return out
}

func FuzzRecordCodec(f *testing.F) {
	for _, r := range codecRecords() {
		if v, err := json.Marshal(r); err == nil {
			f.Add(v, r.IP.String(), string(r.State), r.ContainerID, r.Identity.Namespace, r.Identity.Name, int64(r.Duration), r.RangeSet, r.Clamped, r.AllocatedAt.UnixNano())
		}
	}
	f.Fuzz(func(t *testing.T, v []byte, ip, state, s1, s2, s3 string, n int64, rangeSet int, flag bool, at int64) {
		checkDecode(t, v)
		addr, _ := netip.ParseAddr(ip)
		tm := time.Unix(0, at).In(time.FixedZone("z", int(n%50000)))
		id := reservation.Identity{Namespace: s2, Name: s3, IfName: s1, Legacy: flag}
		checkEncode(t, &reservation.Record{IP: addr, RangeSet: rangeSet, State: reservation.State(state), ContainerID: s1, IfName: s2,
			Netns: s3, BootID: s1, Identity: id, UID: s2, PodName: s3, Duration: time.Duration(n), RequestedDuration: time.Duration(-n),
			Clamped: flag, DurationFrom: s1, AllocatedAt: tm, ReleasedAt: tm.Add(time.Duration(n)), LastContainerID: s3,
			LastIdentity: reservation.Identity{Namespace: s3, Name: s2}, Imported: !flag, ImportedFrom: s2})
	})
}
