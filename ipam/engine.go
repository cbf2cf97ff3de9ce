package ipam

import (
	"log/slog"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// Keys of per-network metadata.
const (
	metaBootID            = "bootID"
	metaHostLocalImported = "hostLocalImported"
	metaLastReservedPre   = "lastReserved."
)

// Env is what the engine needs from the machine; tests replace it.
type Env struct {
	// Now returns the current time.
	Now func() time.Time
	// BootID identifies the current boot (/proc/sys/kernel/random/boot_id).
	BootID string
	// BootTime returns when the current boot started; it is asked only after
	// a reboot. Nil means "unknown" (the reservation clock then starts now).
	BootTime func() time.Time
	// SandboxGone reports whether a recorded path — a network namespace, or
	// host-local's file of an imported allocation — is gone, so its sandbox is
	// dead. Nil means "always alive".
	SandboxGone func(netns string) bool
	// Log receives what the operator should know about; nil discards.
	Log *slog.Logger
}

// Engine allocates addresses from a network's range sets by the rules of that
// network's config. Build it with NewEngine: every rule (reuse delay, pool-full
// policy, host-local import) comes from the config, so no caller can apply one
// network's records with other rules.
type Engine struct {
	conf      *Config    // the network's config (a rebuild derives each pod's identity from a copy)
	rangeSets []RangeSet // canonical, as returned by LoadConfig
	policy    PoolFullPolicy
	// reuseDelay keeps an address freed without a reservation out of use for
	// this long while others are free (0: freed addresses are free at once).
	reuseDelay time.Duration
	// hostLocalDir is host-local's data directory for this network
	// (<hostLocalDataDir>/<network>); "" disables the import.
	hostLocalDir string
	// hostLocal is the import of hostLocalDir under way (its listing kept
	// for the transaction that runs again with room).
	hostLocal *HostLocal
	// maxPerNamespace bounds the identities of one namespace holding a
	// reservation in the network (ipam.reservation.maxPerNamespace); a DEL
	// beyond it frees instead of reserving. 0: no bound.
	maxPerNamespace int
	env             Env
}

// NewEngine returns the engine of the network whose loaded config is c.
func NewEngine(c *Config, env Env) *Engine {
	e := &Engine{conf: c, rangeSets: c.Ranges, policy: c.Reservation.PoolFull, reuseDelay: c.Reservation.ReuseDelay,
		maxPerNamespace: c.Reservation.MaxPerNamespace, env: env}
	if c.HostLocalDataDir != "" {
		e.hostLocalDir = c.HostLocalDataDir + "/" + c.Name
	}
	return e
}

func (e *Engine) log() *slog.Logger {
	if e.env.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.env.Log
}

func (e *Engine) now() time.Time {
	if e.env.Now == nil {
		return time.Now()
	}
	return e.env.Now()
}

// alive reports whether an allocation's sandbox may still be running.
func (e *Engine) alive(r *reservation.Record) bool {
	if r.State != reservation.Allocated {
		return false
	}
	if r.BootID != "" && e.env.BootID != "" && r.BootID != e.env.BootID {
		return false
	}
	if e.env.SandboxGone == nil {
		return true
	}
	if r.Netns != "" && e.env.SandboxGone(r.Netns) {
		return false
	}
	if r.ImportedFrom != "" && e.env.SandboxGone(r.ImportedFrom) {
		return false // host-local released the pod (its DEL went to host-local)
	}
	return true
}
