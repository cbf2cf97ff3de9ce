// Package entry is the placement index's entry: one line of a node's value
// in a shard, "<identity> <pod> <seq> <since> <until> <ip>[,<ip>…]", the
// form deploy/placement's policies split and check. It needs nothing of
// Kubernetes, so that fuzzing its parser instruments no API client.
package entry

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stickyip/stickyip/contract"
)

// timeFormat is how Since and Until are written: RFC 3339 in UTC, to the
// millisecond (deploy/placement's index policy checks exactly this form).
const timeFormat = "2006-01-02T15:04:05.000Z"

// running is Until's text while a sandbox holds the addresses.
const running = "-"

// Retained is Until for a reservation that its StatefulSet keeps
// (reservation.Record.Held): no time ends it. It is the last time of the
// form (9999-12-31T23:59:59.999Z), which every stickyip and index policy
// reads as a time: an older reader keeps the entry until then, the hint
// counts it as any other (it reads no time), and a rebuilt store takes it
// back as held.
var Retained = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)

// MaxValueLen bounds a node's value in one shard (characters), so that no
// node fills a shard (a ConfigMap holds at most 1 MiB) for the others; the
// index policy refuses longer ones.
const MaxValueLen = 16384

// MaxIPs bounds the addresses of one entry (one per range set, as the
// plugin's stickyip.io/ips).
const MaxIPs = 8

// Line is one entry: an identity a node holds addresses for.
type Line struct {
	// Identity is a pod name, or contract.KeyedIdentity of a
	// stickyip.io/identity value; in the pod's namespace (the shard's).
	Identity string
	// Pod is the pod that holds, or last held, the addresses on the node:
	// for a pod-name identity, the identity itself.
	Pod string
	// Seq orders the claims of the identity: the index policy takes a
	// claim only with a Seq above every other node's for the identity and
	// at most the shard's resourceVersion, so of two nodes listing it the
	// one with the larger Seq claimed it last.
	Seq uint64
	// Since is when the pod got the addresses on the node (its ADD).
	Since time.Time
	// Until is when the reservation expires; zero while a sandbox holds the
	// addresses; Retained while its StatefulSet keeps it.
	Until time.Time
	// IPs are the addresses, sorted.
	IPs []string
}

// Running reports whether a sandbox holds the addresses.
func (l Line) Running() bool { return l.Until.IsZero() }

// Held reports whether the entry is a reservation its StatefulSet keeps
// (Until is Retained).
func (l Line) Held() bool { return l.Until.Equal(Retained) }

// SameClaim reports whether l and o are one claim: the same identity, pod
// and ADD (times to the millisecond, as written). Only the reservation's
// end and the addresses may change without a new claim.
func (l Line) SameClaim(o Line) bool {
	return l.Identity == o.Identity && l.Pod == o.Pod && ms(l.Since).Equal(ms(o.Since))
}

// Equal reports whether l and o say the same, as written.
func (l Line) Equal(o Line) bool {
	return l.SameClaim(o) && l.Seq == o.Seq && ms(l.Until).Equal(ms(o.Until)) && slices.Equal(l.IPs, o.IPs)
}

func ms(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

// Parse reads one entry, checking what the index policy checks.
func Parse(s string) (Line, error) {
	f := strings.Split(s, " ")
	if len(f) != 6 {
		return Line{}, fmt.Errorf("entry %q: want \"<identity> <pod> <seq> <since> <until> <ip>[,<ip>…]\"", contract.Clip(s, contract.ClipLen))
	}
	bad := func(what string, err error) (Line, error) {
		return Line{}, fmt.Errorf("entry %q: %s: %w", contract.Clip(s, contract.ClipLen), what, err)
	}
	l := Line{Identity: f[0], Pod: f[1]}
	if !isIdentity(l.Identity) {
		return bad("identity", errors.New("neither a pod name nor identity:<key>"))
	}
	if !isName(l.Pod) {
		return bad("pod", errors.New("not a pod name"))
	}
	if _, keyed := contract.IdentityKey(l.Identity); !keyed && l.Pod != l.Identity {
		return bad("pod", errors.New("the entry of a pod-name identity names that pod"))
	}
	var err error
	if l.Seq, err = parseSeq(f[2]); err != nil {
		return bad("seq", err)
	}
	if l.Since, err = parseTime(f[3]); err != nil {
		return bad("since", err)
	}
	if f[4] != running {
		if l.Until, err = parseTime(f[4]); err != nil {
			return bad("until", err)
		}
	}
	if l.IPs, err = parseIPs(f[5]); err != nil {
		return bad("addresses", err)
	}
	return l, nil
}

func parseIPs(s string) ([]string, error) {
	parts := strings.Split(s, ",")
	if len(parts) > MaxIPs {
		return nil, fmt.Errorf("more than %d", MaxIPs)
	}
	var out []netip.Addr
	for _, p := range parts {
		// As the policy's isIP and ip.isCanonical: no zone, no IPv4-mapped
		// IPv6, the canonical form.
		a, err := netip.ParseAddr(p)
		if err != nil || a.Zone() != "" || a.Is4In6() || a.String() != p {
			return nil, fmt.Errorf("%q is not a canonical address", contract.Clip(p, contract.ClipLen))
		}
		out = append(out, a)
	}
	return sortedIPs(out), nil
}

// SortIPs returns the addresses ips sorted as an entry holds them; an
// address that does not parse is dropped.
func SortIPs(ips []string) []string {
	var out []netip.Addr
	for _, s := range ips {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return sortedIPs(out)
}

func sortedIPs(as []netip.Addr) []string {
	slices.SortFunc(as, netip.Addr.Compare)
	as = slices.Compact(as)
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// String renders l as an entry.
func (l Line) String() string {
	until := running
	if !l.Until.IsZero() {
		until = l.Until.UTC().Format(timeFormat)
	}
	return strings.Join([]string{l.Identity, l.Pod, strconv.FormatUint(l.Seq, 10), l.Since.UTC().Format(timeFormat), until,
		strings.Join(l.IPs, ",")}, " ")
}

// ParseValue reads a node's value in a shard: its entries, one per line.
// A line that cannot be read is skipped and reported in bad, so that one
// bad entry never hides the others.
func ParseValue(v string) (lines []Line, bad []error) {
	for _, s := range strings.Split(v, "\n") {
		if s == "" {
			continue
		}
		l, err := Parse(s)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		lines = append(lines, l)
	}
	return lines, bad
}

// FormatValue renders a node's value: its entries sorted by identity, one
// per line.
func FormatValue(lines []Line) string {
	sorted := slices.SortedFunc(slices.Values(lines), func(a, b Line) int { return strings.Compare(a.Identity, b.Identity) })
	var b strings.Builder
	for i, l := range sorted {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l.String())
	}
	return b.String()
}
