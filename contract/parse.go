package contract

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxAnnotationValueLen bounds AnnotationReservedDuration; anything longer is
// rejected before parsing.
const MaxAnnotationValueLen = 64

// ParseReservedDuration parses a value of AnnotationReservedDuration. An
// integer is a number of minutes (the OpenKruise form); otherwise it must be a
// non-negative Go duration ("90s", "1h30m"). "0" means no reservation.
func ParseReservedDuration(v string) (time.Duration, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s=%q: %s", ErrInvalidAnnotation, AnnotationReservedDuration, Clip(v, ClipLen), why)
	}
	if len(v) > MaxAnnotationValueLen {
		return 0, bad(fmt.Sprintf("longer than %d characters", MaxAnnotationValueLen))
	}
	s := strings.TrimSpace(v)
	if s == "" {
		return 0, bad("empty; use 0 or remove the annotation for no reservation")
	}
	if isDigits(s) {
		m, err := strconv.ParseInt(s, 10, 64)
		if err != nil || m > math.MaxInt64/int64(time.Minute) {
			return 0, bad("too many minutes")
		}
		return time.Duration(m) * time.Minute, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case strings.HasPrefix(s, "-") || (err == nil && d < 0):
		return 0, bad("negative duration")
	case err != nil:
		return 0, bad("not a number of minutes or a Go duration such as 90s or 1h30m (or out of range)")
	}
	return d, nil
}

func isDigits(s string) bool {
	s = strings.TrimPrefix(s, "+")
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// ParseDurationFrom parses a value of AnnotationDurationFrom:
// DurationFromNamespace or DurationFromCluster.
func ParseDurationFrom(v string) (string, error) {
	if v != DurationFromNamespace && v != DurationFromCluster {
		return "", fmt.Errorf("%w: %s=%q: want %q or %q (set by the stickyip-statefulsets admission policy)",
			ErrInvalidAnnotation, AnnotationDurationFrom, Clip(v, ClipLen), DurationFromNamespace, DurationFromCluster)
	}
	return v, nil
}

// ParseRetention parses a value of AnnotationRetention: RetentionWorkload
// or RetentionFixed.
func ParseRetention(v string) (string, error) {
	if v != RetentionWorkload && v != RetentionFixed {
		return "", fmt.Errorf("%w: %s=%q: want %q (the default: a StatefulSet pod's reservation follows its StatefulSet) or %q (its duration after the pod's deletion, whatever its StatefulSet does)",
			ErrInvalidAnnotation, AnnotationRetention, Clip(v, ClipLen), RetentionWorkload, RetentionFixed)
	}
	return v, nil
}

// StatefulSetOrdinal returns the ordinal of pod in StatefulSet set: the
// StatefulSet controller names its pods <set>-<ordinal>, the ordinal in
// decimal without a sign or a leading zero. false: pod is not a name
// StatefulSet set gives.
func StatefulSetOrdinal(pod, set string) (int, bool) {
	s, ok := strings.CutPrefix(pod, set+"-")
	if !ok || s == "" || s[0] == '+' || (s[0] == '0' && s != "0") || !isDigits(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32) // spec.ordinals.start and replicas are int32
	if err != nil {
		return 0, false
	}
	return int(n), true
}

// StatefulSetOf returns the StatefulSet and ordinal a pod name would have
// if a StatefulSet gave it: the name up to its last "-", and the ordinal
// after it (StatefulSetOrdinal). false: no StatefulSet gives such a name.
func StatefulSetOf(pod string) (set string, ordinal int, ok bool) {
	i := strings.LastIndexByte(pod, '-')
	if i <= 0 {
		return "", 0, false
	}
	set = pod[:i]
	ordinal, ok = StatefulSetOrdinal(pod, set)
	return set, ordinal, ok
}

// ParseCheckpointOf parses a value of AnnotationCheckpointOf ("namespace/name").
func ParseCheckpointOf(v string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(v, "/")
	if !ok || strings.Contains(n, "/") || !IsNamespace(ns) || !IsPodName(n) {
		return "", "", fmt.Errorf("%w: %s=%q: want namespace/name", ErrInvalidAnnotation, AnnotationCheckpointOf, Clip(v, ClipLen))
	}
	return ns, n, nil
}

// IsNamespace reports whether s is a valid namespace name (an RFC 1123 label).
func IsNamespace(s string) bool { return isDNSLabel(s) }

// IsPodName reports whether s is a valid pod name (an RFC 1123 subdomain).
func IsPodName(s string) bool { return IsDNSSubdomain(s) }

// isDNSLabel: 1-63 lower-case alphanumerics or '-', starting and ending alphanumeric.
func isDNSLabel(s string) bool { return len(s) <= 63 && isDNSPart(s) }

// isDNSPart: one or more lower-case alphanumerics or '-', starting and
// ending alphanumeric (a dot-separated part of a subdomain, of any length).
func isDNSPart(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// IsDNSLabel reports whether s is an RFC 1123 label (what a host name, a
// namespace or a container name must be).
func IsDNSLabel(s string) bool { return isDNSLabel(s) }

// IsDNSSubdomain reports whether s is an RFC 1123 subdomain as Kubernetes
// checks one (what a pod name must be): at most 253 characters in
// dot-separated parts of lower-case alphanumerics and '-', each starting
// and ending alphanumeric. Kubernetes does not hold a part to a DNS label's
// 63 characters, so neither does this: a pod may be named with a
// 64-character part (TestIsDNSSubdomainAsKubernetes holds it to
// apimachinery's validation.IsDNS1123Subdomain).
func IsDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !isDNSPart(l) {
			return false
		}
	}
	return true
}

// ParseIdentity parses a value of AnnotationIdentity: a key naming the
// identity a reservation belongs to within the pod's namespace. It has the
// form of a pod name (an RFC 1123 subdomain), so that a key cannot reach into
// another namespace ("ns/name") or look like anything but a name.
func ParseIdentity(v string) (string, error) {
	if !IsPodName(v) {
		return "", fmt.Errorf("%w: %s=%q: want a name such as a pod name (lower-case letters, digits, '-' and '.', at most 253 characters); it names the identity within the pod's namespace", ErrInvalidAnnotation, AnnotationIdentity, Clip(v, ClipLen))
	}
	return v, nil
}

// IdentityKeyPrefix starts the identity name of a pod annotated
// AnnotationIdentity: the annotation "cache" gives the identity
// "identity:cache". A pod name never contains ':', so a pod named db-0 and
// another pod's stickyip.io/identity: db-0 are two identities, in the store
// and in the placement index alike.
const IdentityKeyPrefix = "identity:"

// KeyedIdentity is the identity name of the AnnotationIdentity value key.
func KeyedIdentity(key string) string { return IdentityKeyPrefix + key }

// IdentityKey returns the AnnotationIdentity value an identity name was made
// from, and whether it was made from one (false: the name is a pod's).
func IdentityKey(name string) (key string, keyed bool) {
	return strings.CutPrefix(name, IdentityKeyPrefix)
}

// IsIdentityName reports whether name is an identity name: a pod name, or
// KeyedIdentity of a valid AnnotationIdentity value.
func IsIdentityName(name string) bool {
	if key, keyed := IdentityKey(name); keyed {
		return IsPodName(key)
	}
	return IsPodName(name)
}

// maxRequestedIPs bounds AnnotationIPs: one address per range set.
const maxRequestedIPs = 8

// ParseIPs parses a value of AnnotationIPs: comma-separated IPv4 or IPv6
// addresses, each at most once. Which range set each belongs to is the
// engine's business.
func ParseIPs(v string) ([]netip.Addr, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s=%q: %s", ErrInvalidAnnotation, AnnotationIPs, Clip(v, ClipLen), why)
	}
	if strings.TrimSpace(v) == "" {
		return nil, bad("empty; remove the annotation to let stickyip choose")
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxRequestedIPs {
		return nil, bad(fmt.Sprintf("more than %d addresses", maxRequestedIPs))
	}
	var out []netip.Addr
	for _, p := range parts {
		p = strings.TrimSpace(p)
		a, err := netip.ParseAddr(p)
		if err != nil || a.Zone() != "" {
			return nil, bad(fmt.Sprintf("%q is not an IP address", Clip(p, ClipLen)))
		}
		a = a.Unmap()
		if slices.Contains(out, a) {
			return nil, bad(fmt.Sprintf("%s given twice", a))
		}
		out = append(out, a)
	}
	return out, nil
}
