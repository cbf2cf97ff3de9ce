package contract

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The parsers must never panic, and every rejection must wrap
// ErrInvalidAnnotation and name the annotation (the plugin turns it into
// CNI error 7, checkpointd into a refusal naming the pod).

func FuzzParseReservedDuration(f *testing.F) {
	for _, s := range []string{"0", "5", "90s", "1h30m", "", "-5", "1e309", "+7", "99999999999999999999", " 3 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseReservedDuration(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationReservedDuration) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative duration %v accepted", s, d)
		}
	})
}
func FuzzParseCheckpointOf(f *testing.F) {
	for _, s := range []string{"prod/db-0", "a/b/c", "/", "", "kube-system/x.y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, name, err := ParseCheckpointOf(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationCheckpointOf) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		if ns+"/"+name != s || !IsNamespace(ns) || !IsPodName(name) {
			t.Fatalf("%q: accepted as %q/%q", s, ns, name)
		}
	})
}

func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"db", "a/b", "", "x.y-z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseIdentity(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationIdentity) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		if got != s || strings.ContainsAny(got, "/ \x00") || !IsPodName(got) {
			t.Fatalf("%q: accepted as %q", s, got)
		}
	})
}

func FuzzParseIPs(f *testing.F) {
	for _, s := range []string{"10.0.0.1", "10.0.0.1,fd00::1", ",", "1.2.3.4/5", "::ffff:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseIPs(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationIPs) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		if len(got) == 0 || len(got) > maxRequestedIPs {
			t.Fatalf("%q: accepted %d addresses", s, len(got))
		}
		for i, a := range got {
			if !a.IsValid() || a.Is4In6() || a.Zone() != "" || slices.Contains(got[:i], a) {
				t.Fatalf("%q: accepted %v", s, got)
			}
		}
	})
}

func FuzzParseRetention(f *testing.F) {
	for _, s := range []string{"fixed", "workload", "", "Fixed", "fixed\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseRetention(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidAnnotation) || !strings.Contains(err.Error(), AnnotationRetention) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		if got != s || (s != RetentionFixed && s != RetentionWorkload) {
			t.Fatalf("%q: accepted as %q", s, got)
		}
	})
}

func FuzzStatefulSetOrdinal(f *testing.F) {
	for _, s := range [][2]string{{"db-0", "db"}, {"db-2", "db"}, {"db-02", "db"}, {"db-+2", "db"}, {"db-2147483648", "db"}, {"db-x", "db"}, {"db-", "db"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pod, set string) {
		if s, n, ok := StatefulSetOf(pod); ok && (n < 0 || pod != s+"-"+strconv.Itoa(n)) {
			t.Fatalf("StatefulSetOf(%q) = %q, %d", pod, s, n)
		}
		n, ok := StatefulSetOrdinal(pod, set)
		if !ok {
			return
		}
		if n < 0 || pod != set+"-"+strconv.Itoa(n) {
			t.Fatalf("StatefulSetOrdinal(%q, %q) = %d: not the name the controller gives ordinal %d", pod, set, n, n)
		}
	})
}
