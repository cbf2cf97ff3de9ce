package main

import (
	"fmt"
	"sort"
	"time"
)

// samples is a set of latencies of one operation.
type samples []time.Duration

// percentile returns the nearest-rank p-th percentile (0 < p <= 100), 0 when empty.
func (s samples) percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := append(samples(nil), s...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	rank := int(p/100*float64(len(sorted)) + 0.999999999)
	if rank < 1 {
		rank = 1
	}
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

func (s samples) median() time.Duration { return s.percentile(50) }
func (s samples) p99() time.Duration    { return s.percentile(99) }

func (s samples) total() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t
}

// holding is the span during which a pod certainly held ip: from the end of its ADD
// to the start of its DEL. Two pods whose spans overlap must never hold the same IP.
type holding struct {
	pod      string
	ip       string
	from, to time.Time
}

// duplicates returns one message per pair of pods that held the same IP at the same
// time. An IP reused after the previous holder's DEL started is not a duplicate: the
// DEL may already have freed it.
func duplicates(hs []holding) []string {
	byIP := map[string][]holding{}
	for _, h := range hs {
		byIP[h.ip] = append(byIP[h.ip], h)
	}
	var out []string
	ips := make([]string, 0, len(byIP))
	for ip := range byIP {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	for _, ip := range ips {
		list := byIP[ip]
		sort.Slice(list, func(i, j int) bool { return list[i].from.Before(list[j].from) })
		for i := 0; i < len(list); i++ {
			for j := i + 1; j < len(list); j++ {
				if list[j].from.Before(list[i].to) {
					out = append(out, fmt.Sprintf("%s held by %s and %s at once", ip, list[i].pod, list[j].pod))
				}
			}
		}
	}
	return out
}

// ratio returns a/b, or -1 when b is zero.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return -1
	}
	return float64(a) / float64(b)
}

// fmtDur prints a latency with a precision that suits its size.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}
