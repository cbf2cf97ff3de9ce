package ipam

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Pod annotations stickyip reads, delivered by the runtime in the CNI
// capability io.kubernetes.cri.pod-annotations.
const (
	// AnnotationReservedDuration: how long to keep the pod's IP after its
	// sandbox is deleted. Integer = minutes; a Go duration is also accepted.
	AnnotationReservedDuration = "io.kubernetes.cri/reserved-ip-duration"
	// AnnotationCheckpointOf: set by checkpointd on a restored static pod; names
	// the parent "namespace/name" whose reservation the pod uses.
	AnnotationCheckpointOf = "stickyip.io/checkpoint-of"
	// AnnotationConfigSource is set by the kubelet itself; "file" marks a static pod.
	AnnotationConfigSource = "kubernetes.io/config.source"
)

// maxAnnotationLen bounds the duration annotation; anything longer is rejected
// before parsing.
const maxAnnotationLen = 64

// ParseReservedDuration parses the value of AnnotationReservedDuration. An
// integer is a number of minutes (the OpenKruise form); otherwise it must be a
// non-negative Go duration ("90s", "1h30m"). "0" means no reservation.
func ParseReservedDuration(v string) (time.Duration, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: annotation %s=%q: %s", ErrInvalidConfig, AnnotationReservedDuration, clip(v), why)
	}
	if len(v) > maxAnnotationLen {
		return 0, bad(fmt.Sprintf("longer than %d characters", maxAnnotationLen))
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
	for _, r := range strings.TrimPrefix(s, "+") {
		if r < '0' || r > '9' {
			return false
		}
	}
	return strings.TrimPrefix(s, "+") != ""
}

// ParseCheckpointOf parses AnnotationCheckpointOf ("namespace/name").
func ParseCheckpointOf(v string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(v, "/")
	if !ok || strings.Contains(n, "/") || !validK8sName(ns, 63) || !validK8sName(n, 253) {
		return "", "", fmt.Errorf("%w: annotation %s=%q: want namespace/name", ErrInvalidConfig, AnnotationCheckpointOf, clip(v))
	}
	return ns, n, nil
}

// validK8sName accepts DNS-subdomain-like names: lower-case alphanumerics, '-' and '.'.
func validK8sName(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		if !(unicode.IsLower(r) || unicode.IsDigit(r) || r == '-' || r == '.') || r > unicode.MaxASCII {
			return false
		}
	}
	return true
}

// clip shortens a value for an error message.
func clip(s string) string { return clipTo(s, 80) }

// clipTo shortens s to at most n bytes (plus an ellipsis), so an error quoting
// hostile input stays readable.
func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
