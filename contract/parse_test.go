package contract

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseReservedDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"0", 0, ""},
		{"5", 5 * time.Minute, ""},
		{"+5", 5 * time.Minute, ""},
		{" 30 ", 30 * time.Minute, ""},
		{"90s", 90 * time.Second, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"", 0, "empty"},
		{"-5", 0, "negative"},
		{"-1h", 0, "negative"},
		{"abc", 0, "Go duration"},
		{"1e309", 0, "Go duration"},
		{"5 minutes", 0, "Go duration"},
		{"99999999999999999999", 0, "too many minutes"},
		{"153722867280912931", 0, "too many minutes"},
		{"999999999h", 0, "out of range"},
		{strings.Repeat("9", 65), 0, "longer than 64"},
	} {
		got, err := ParseReservedDuration(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), AnnotationReservedDuration)) {
			t.Errorf("%q: err = %v, want one naming the annotation and %q", tc.in, err, tc.err)
		}
	}
}
func TestParseCheckpointOf(t *testing.T) {
	for _, tc := range []struct {
		in       string
		ns, name string
	}{
		{"prod/db-0", "prod", "db-0"},
		{"kube-system/etcd.node-1", "kube-system", "etcd.node-1"},
		{"prod", "", ""},
		{"prod/db/0", "", ""},
		{"/db", "", ""},
		{"prod/", "", ""},
		{"Prod/db", "", ""},
		{"prod/-db", "", ""},
		{"a.b/db", "", ""}, // a namespace is a label: no dots
		{strings.Repeat("a", 64) + "/db", "", ""},
		{"prod/" + strings.Repeat("a", 254), "", ""},
	} {
		ns, name, err := ParseCheckpointOf(tc.in)
		if tc.ns == "" {
			if err == nil || !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationCheckpointOf) {
				t.Errorf("%q: got %s/%s, err %v; want an ErrInvalidAnnotation naming the annotation", tc.in, ns, name, err)
			}
			continue
		}
		if err != nil || ns != tc.ns || name != tc.name {
			t.Errorf("%q: got %s/%s, %v; want %s/%s", tc.in, ns, name, err, tc.ns, tc.name)
		}
	}
}

func TestOptedIn(t *testing.T) {
	for _, k := range OptInAnnotations {
		if !OptedIn(map[string]string{k: "true"}) {
			t.Errorf("%s=true not an opt-in", k)
		}
		if OptedIn(map[string]string{k: "True"}) || OptedIn(map[string]string{k: "1"}) {
			t.Errorf("%s: only the exact value \"true\" opts in", k)
		}
	}
	if OptedIn(nil) {
		t.Error("no annotations opted in")
	}
}

func TestParseIdentity(t *testing.T) {
	for _, ok := range []string{"db", "cmdb-agent", "web.v2", strings.Repeat("abc.", 63) + "a"} {
		if got, err := ParseIdentity(ok); err != nil || got != ok {
			t.Errorf("%q: %q, %v", ok, got, err)
		}
	}
	for _, bad := range []string{"", "other/db", "DB", "-db", "a b", strings.Repeat("a", 254), "db\x00"} {
		if _, err := ParseIdentity(bad); !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationIdentity) {
			t.Errorf("%q: err %v, want one naming the annotation", bad, err)
		}
	}
}

func TestParseIPs(t *testing.T) {
	got, err := ParseIPs(" 10.244.1.5 , fd00::5")
	if err != nil || len(got) != 2 || got[0].String() != "10.244.1.5" || got[1].String() != "fd00::5" {
		t.Fatalf("ParseIPs = %v, %v", got, err)
	}
	if got, _ := ParseIPs("::ffff:10.0.0.1"); len(got) != 1 || !got[0].Is4() {
		t.Errorf("an IPv4-mapped address is not read as IPv4: %v", got)
	}
	for _, bad := range []string{"", " ", "10.0.0.1,", "10.0.0.1/24", "banana", "fe80::1%eth0", "10.0.0.1,10.0.0.1", strings.Repeat("10.0.0.1,", 9) + "10.0.0.2"} {
		if _, err := ParseIPs(bad); !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationIPs) {
			t.Errorf("%q: err %v, want one naming the annotation", bad, err)
		}
	}
}

func TestParseDurationFrom(t *testing.T) {
	for _, v := range []string{DurationFromNamespace, DurationFromCluster} {
		if got, err := ParseDurationFrom(v); err != nil || got != v {
			t.Errorf("%q: got %q, %v", v, got, err)
		}
	}
	for _, v := range []string{"", "Namespace", "pod", "namespace ", strings.Repeat("x", 200)} {
		_, err := ParseDurationFrom(v)
		if !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationDurationFrom) {
			t.Errorf("%q: err = %v, want one naming %s", v, err, AnnotationDurationFrom)
		}
	}
}

// The names a StatefulSet gives its pods: <set>-<ordinal>, the
// ordinal in decimal as the controller writes it.
func TestStatefulSetOrdinal(t *testing.T) {
	for _, tc := range []struct {
		pod, set string
		want     int
		ok       bool
	}{
		{"db-0", "db", 0, true}, {"db-12", "db", 12, true}, {"web-0-3", "web-0", 3, true}, {"db-2147483647", "db", 2147483647, true},
		{"db-2147483648", "db", 0, false}, {"db-02", "db", 0, false}, {"db-+2", "db", 0, false}, {"db-", "db", 0, false},
		{"db-x", "db", 0, false}, {"dbx-1", "db", 0, false}, {"db-1", "d", 0, false},
	} {
		if n, ok := StatefulSetOrdinal(tc.pod, tc.set); n != tc.want || ok != tc.ok {
			t.Errorf("StatefulSetOrdinal(%q, %q) = %d, %v; want %d, %v", tc.pod, tc.set, n, ok, tc.want, tc.ok)
		}
	}
	if set, n, ok := StatefulSetOf("web-0-3"); set != "web-0" || n != 3 || !ok {
		t.Errorf("StatefulSetOf(web-0-3) = %q, %d, %v", set, n, ok)
	}
	if _, _, ok := StatefulSetOf("cache-6b58469b67-kfzpb"); ok {
		t.Error("a ReplicaSet's pod name read as a StatefulSet's")
	}
}
