//go:build reliability

package reliability

import (
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// envInt reads a tuning knob from the environment (RELIABILITY_*).
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// newRand returns a seeded generator and logs the seed so a failing run can be
// repeated with RELIABILITY_SEED.
func newRand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RELIABILITY_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("RELIABILITY_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("random seed %d (repeat with RELIABILITY_SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x5eed))
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// newWorkerRand derives a worker's own generator from a seed drawn from the
// suite's generator (rand.Rand is not safe for concurrent use).
func newWorkerRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, ^seed))
}
