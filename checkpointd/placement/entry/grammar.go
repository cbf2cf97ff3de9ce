package entry

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/stickyip/stickyip/contract"
)

// The forms of an entry's fields, as RE2 patterns: deploy/placement's index
// policy and placement hint match each field against these very strings
// (CEL's matches() is Go's regexp), and Parse does here, so that the
// policies and checkpointd accept the same lines (deploy/policycheck
// evaluates both).
const (
	// NamePattern is an RFC 1123 subdomain (a pod name, or an identity's
	// key): dot-separated labels of 1 to 63 characters. Its length is
	// bounded apart: at most MaxNameLen.
	NamePattern = `^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$`
	// SeqPattern is a seq: decimal, no leading zero, at most 18 digits (the
	// policies compare seqs as CEL ints).
	SeqPattern = `^(0|[1-9][0-9]{0,17})$`
	// TimePattern is an entry's time: RFC 3339 in UTC to the millisecond,
	// each field in its range.
	TimePattern = `^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9][.][0-9]{3}Z$`
)

// MaxNameLen bounds a pod name and an identity's key.
const MaxNameLen = 253

var (
	nameRe = regexp.MustCompile(NamePattern)
	seqRe  = regexp.MustCompile(SeqPattern)
	timeRe = regexp.MustCompile(TimePattern)
)

// isName reports whether s is a name of NamePattern, at most MaxNameLen long.
func isName(s string) bool { return len(s) <= MaxNameLen && nameRe.MatchString(s) }

// isIdentity reports whether s is an identity: a name, or
// contract.KeyedIdentity of one.
func isIdentity(s string) bool {
	if key, keyed := contract.IdentityKey(s); keyed {
		return isName(key)
	}
	return isName(s)
}

// IsSeq reports whether s is a seq (SeqPattern).
func IsSeq(s string) bool { return seqRe.MatchString(s) }

// parseSeq reads a seq.
func parseSeq(s string) (uint64, error) {
	if !IsSeq(s) {
		return 0, fmt.Errorf("%q is not a seq (a number of at most 18 digits)", contract.Clip(s, contract.ClipLen))
	}
	return strconv.ParseUint(s, 10, 63)
}

// parseTime reads a time of TimePattern. A day the month does not have
// (February 30th) is of the form, as the policies have it: it is read as
// time.Date normalizes it.
func parseTime(s string) (time.Time, error) {
	if !timeRe.MatchString(s) {
		return time.Time{}, fmt.Errorf("%q is not a time as %s", contract.Clip(s, contract.ClipLen), timeFormat)
	}
	n := func(i, j int) int { v, _ := strconv.Atoi(s[i:j]); return v }
	return time.Date(n(0, 4), time.Month(n(5, 7)), n(8, 10), n(11, 13), n(14, 16), n(17, 19), n(20, 23)*int(time.Millisecond), time.UTC), nil
}
