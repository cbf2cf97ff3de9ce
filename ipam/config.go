package ipam

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/contract"
)

// Defaults of the stickyip-specific keys only the plugin reads (documented
// in docs/configuration.md); those checkpointd shares
// (dataDir, hostLocalDataDir, lockTimeout, reservation.maxDuration and
// maxPerNamespace) are package contract's.
const (
	// DefaultReuseDelay is reservation.reuseDelay: an address freed without a
	// reservation is not handed out again for this long while others are
	// free. 30 s outlasts the usual DNS TTL of a Service's endpoints and a
	// pod's own termination, and costs nothing on a pool with room.
	DefaultReuseDelay = 30 * time.Second
	// DefaultHolderWait is holderWait: how long an ADD whose identity's
	// address is still held by a sandbox that may be running (a replacement
	// created before its predecessor is gone) waits for that sandbox's DEL
	// before failing with error 11.
	DefaultHolderWait = 10 * time.Second
	// MaxHolderWait is the largest holderWait accepted: well below the
	// kubelet's runtime request timeout (2 min), which bounds the whole ADD.
	MaxHolderWait = time.Minute
)

// PoolFullPolicy says what an ADD does when a range set has no free address
// but holds reservations.
type PoolFullPolicy string

const (
	// PoolFullEvict gives up the reservation closest to expiry (default).
	PoolFullEvict PoolFullPolicy = "evict"
	// PoolFullFail fails the ADD and keeps every reservation.
	PoolFullFail PoolFullPolicy = "fail"
)

// ReservationConfig is the "reservation" block of the IPAM config.
type ReservationConfig struct {
	MaxDuration time.Duration
	PoolFull    PoolFullPolicy
	ReuseDelay  time.Duration
	// MaxPerNamespace bounds the pod identities of one namespace holding a
	// reservation in the network; a DEL beyond it frees instead of
	// reserving. 0: no bound.
	MaxPerNamespace int
}

// IPsAnnotationConfig is the "ipsAnnotation" block: who may use
// contract.AnnotationIPs.
type IPsAnnotationConfig struct {
	// Namespaces lists the namespaces whose pods may use the annotation;
	// nil means every namespace (host-local has no such limit), an empty
	// list none.
	Namespaces []string
}

// Allows reports whether pods of namespace may use the annotation.
func (c IPsAnnotationConfig) Allows(namespace string) bool {
	return c.Namespaces == nil || slices.Contains(c.Namespaces, namespace)
}

// Config is everything one CNI call needs: host-local's IPAM config (ranges,
// routes, dataDir, resolvConf, requested IPs), stickyip's own keys, and the pod
// information the runtime passed.
type Config struct {
	Name       string         // network name
	CNIVersion string         // cniVersion of the config
	Ranges     []RangeSet     // canonical range sets, host-local's order
	Routes     []*types.Route // ipam.routes
	DataDir    string         // ipam.dataDir
	ResolvConf string         // ipam.resolvConf
	IPArgs     []net.IP       // requested IPs: CNI_ARGS IP, args.cni.ips, the ips capability

	HostLocalDataDir string // "" disables the import
	LogFile          string
	LockTimeout      time.Duration
	HolderWait       time.Duration // ipam.holderWait
	NewStoreWait     time.Duration // ipam.newStoreWait: the first calls on a node without a store wait this long for checkpointd (0: not at all)
	Reservation      ReservationConfig
	IPsAnnotation    IPsAnnotationConfig

	Args        PodArgs
	Annotations map[string]string
	// ValidAttachments is set on GC.
	ValidAttachments []types.GCAttachment
}

// netConf is the network config as the plugin receives it: host-local's keys
// (see ranges.go), stickyip's own, and what the runtime adds. It is decoded
// once per call.
type netConf struct {
	CNIVersion    string    `json:"cniVersion"`
	Name          string    `json:"name"`
	IPAM          *ipamConf `json:"ipam"`
	RuntimeConfig struct {
		IPRanges    []RangeSet        `json:"ipRanges,omitempty"`
		IPs         []ipArg           `json:"ips,omitempty"`
		Annotations map[string]string `json:"io.kubernetes.cri.pod-annotations"`
	} `json:"runtimeConfig"`
	Args *struct {
		CNI *struct {
			IPs []ipArg `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments"`
}

// ipamConf is the "ipam" block.
type ipamConf struct {
	Range                     // host-local's legacy single range
	Routes     []*types.Route `json:"routes"`
	DataDir    string         `json:"dataDir"`
	ResolvConf string         `json:"resolvConf"`
	Ranges     []RangeSet     `json:"ranges"`

	HostLocalDataDir *string         `json:"hostLocalDataDir"`
	LogFile          string          `json:"logFile"`
	LockTimeout      json.RawMessage `json:"lockTimeout"`
	HolderWait       json.RawMessage `json:"holderWait"`
	NewStoreWait     json.RawMessage `json:"newStoreWait"`
	Reservation      json.RawMessage `json:"reservation"`
	IPsAnnotation    json.RawMessage `json:"ipsAnnotation"`
}

type rawReservation struct {
	MaxDuration     json.RawMessage `json:"maxDuration"`
	ReuseDelay      json.RawMessage `json:"reuseDelay"`
	PoolFull        *string         `json:"poolFull"`
	MaxPerNamespace json.RawMessage `json:"maxPerNamespace"`
}

type rawIPsAnnotation struct {
	Namespaces json.RawMessage `json:"namespaces"`
}

// maxPerNamespaceLimit bounds reservation.maxPerNamespace: more reservations
// than a /16 has addresses is a typo, not a policy.
const maxPerNamespaceLimit = 1 << 16

// decodeBlock decodes the object under key, when present, into v, refusing
// unknown keys (stickyip's own blocks are strict: a typo must not silently
// keep a default).
func decodeBlock(key string, raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, key, contract.Clip(err.Error(), 200))
	}
	return nil
}

// parseCount reads the value of key, a JSON integer from 0 to limit. set is
// false when the key is absent or null.
func parseCount(key string, raw json.RawMessage, limit int) (n int, set bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 || n > limit {
		return 0, false, fmt.Errorf("%w: %s: want a whole number from 0 to %d, got %s", ErrInvalidConfig, key, limit, contract.Clip(string(raw), contract.ClipLen))
	}
	return n, true, nil
}

// parseNamespaces reads the value of key, a JSON list of namespace names.
// A null or absent key is nil (no list); [] is an empty, non-nil list.
func parseNamespaces(key string, raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%w: %s: want a list of namespace names such as [\"kube-system\"], got %s", ErrInvalidConfig, key, contract.Clip(string(raw), contract.ClipLen))
	}
	for _, ns := range list {
		if !contract.IsNamespace(ns) {
			return nil, fmt.Errorf("%w: %s: %q is not a namespace name (lower-case letters, digits and '-', at most 63 characters)", ErrInvalidConfig, key, contract.Clip(ns, contract.ClipLen))
		}
	}
	return append([]string{}, list...), nil
}

// parseDuration reads the value of key, a JSON string holding a non-negative
// Go duration ("90s", "24h"). set is false when the key is absent or null.
// Errors name the key (a json.Unmarshaler cannot: encoding/json does not add
// the field name to the errors it returns).
func parseDuration(key string, raw json.RawMessage) (d time.Duration, set bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, false, fmt.Errorf("%w: %s: want a duration string such as \"90s\" or \"24h\", got %s", ErrInvalidConfig, key, contract.Clip(string(raw), contract.ClipLen))
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, false, fmt.Errorf("%w: %s: want a non-negative duration such as \"90s\" or \"24h\", got %q", ErrInvalidConfig, key, contract.Clip(s, contract.ClipLen))
	}
	return v, true, nil
}

// LoadConfig parses the plugin's stdin and CNI_ARGS. Defaults are set first;
// every error names the key at fault and wraps ErrInvalidConfig or ErrInvalidArgs.
func LoadConfig(stdin []byte, cniArgs string) (*Config, error) {
	args, err := ParseArgs(cniArgs)
	if err != nil {
		return nil, err
	}
	raw, err := parseNetConf(stdin)
	if err != nil {
		return nil, err
	}
	hl, err := loadHostLocal(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: ipam: %s", ErrInvalidConfig, contract.Clip(err.Error(), 300))
	}
	c := &Config{
		Name:             raw.Name,
		CNIVersion:       hl.CNIVersion,
		Ranges:           hl.Ranges,
		Routes:           hl.Routes,
		DataDir:          hl.DataDir,
		ResolvConf:       hl.ResolvConf,
		IPArgs:           hl.IPArgs,
		HostLocalDataDir: contract.DefaultHostLocalDataDir,
		LogFile:          raw.IPAM.LogFile,
		LockTimeout:      contract.DefaultLockTimeout,
		HolderWait:       DefaultHolderWait,
		Reservation: ReservationConfig{MaxDuration: contract.DefaultMaxDuration, PoolFull: PoolFullEvict, ReuseDelay: DefaultReuseDelay,
			MaxPerNamespace: contract.DefaultMaxPerNamespace},
		Args:             args,
		Annotations:      raw.RuntimeConfig.Annotations,
		ValidAttachments: raw.ValidAttachments,
	}
	if c.DataDir == "" {
		c.DataDir = contract.DefaultDataDir
	}
	if raw.IPAM.HostLocalDataDir != nil {
		c.HostLocalDataDir = *raw.IPAM.HostLocalDataDir
	}
	if err := c.loadWaits(raw.IPAM); err != nil {
		return nil, err
	}
	if err := c.loadReservation(raw.IPAM.Reservation); err != nil {
		return nil, err
	}
	var ia rawIPsAnnotation
	if err := decodeBlock("ipam.ipsAnnotation", raw.IPAM.IPsAnnotation, &ia); err != nil {
		return nil, err
	}
	if c.IPsAnnotation.Namespaces, err = parseNamespaces("ipam.ipsAnnotation.namespaces", ia.Namespaces); err != nil {
		return nil, err
	}
	if args.IP.IsValid() {
		c.IPArgs = append([]net.IP{net.IP(args.IP.AsSlice())}, c.IPArgs...)
	}
	return c, nil
}

// parseNetConf decodes the network config (decodeNetConf, else
// json.Unmarshal) and checks what every network needs: a name usable as a
// directory name, and an ipam block.
func parseNetConf(stdin []byte) (*netConf, error) {
	var raw netConf
	if decodeNetConf(stdin, &raw) {
		return checkNetConf(&raw)
	}
	raw = netConf{}
	if err := json.Unmarshal(stdin, &raw); err != nil {
		return nil, fmt.Errorf("%w: network config: %s%s", ErrInvalidConfig, whereIs(stdin), contract.Clip(err.Error(), 300))
	}
	return checkNetConf(&raw)
}

// checkNetConf checks what every network needs (parseNetConf).
func checkNetConf(raw *netConf) (*netConf, error) {
	if raw.Name == "" {
		return nil, fmt.Errorf("%w: network config: key \"name\" is missing or empty", ErrInvalidConfig)
	}
	if len(raw.Name) > 253 || bytes.ContainsAny([]byte(raw.Name), "\x00/") {
		return nil, fmt.Errorf("%w: network config: \"name\" must be at most 253 characters without '/'", ErrInvalidConfig)
	}
	if raw.IPAM == nil {
		return nil, fmt.Errorf("%w: network config: key \"ipam\" is missing", ErrInvalidConfig)
	}
	return raw, nil
}

// loadWaits reads ipam.lockTimeout, ipam.holderWait and ipam.newStoreWait
// over c's defaults.
func (c *Config) loadWaits(ipam *ipamConf) error {
	if d, set, err := parseDuration("ipam.lockTimeout", ipam.LockTimeout); err != nil {
		return err
	} else if set {
		if d == 0 {
			return fmt.Errorf("%w: ipam.lockTimeout must be greater than 0", ErrInvalidConfig)
		}
		c.LockTimeout = d
	}
	if d, set, err := parseDuration("ipam.holderWait", ipam.HolderWait); err != nil {
		return err
	} else if set {
		if d > MaxHolderWait {
			return fmt.Errorf("%w: ipam.holderWait %s is more than %s (the runtime's ADD timeout must not run out first)", ErrInvalidConfig, d, MaxHolderWait)
		}
		c.HolderWait = d
	}
	if d, set, err := parseDuration("ipam.newStoreWait", ipam.NewStoreWait); err != nil {
		return err
	} else if set {
		c.NewStoreWait = d
	}
	return nil
}

// loadReservation reads the ipam.reservation block over c's defaults.
func (c *Config) loadReservation(block json.RawMessage) error {
	var r rawReservation
	if !decodeReservation(block, &r) {
		r = rawReservation{}
		if err := decodeBlock("ipam.reservation", block, &r); err != nil {
			return err
		}
	}
	if d, set, err := parseDuration("ipam.reservation.maxDuration", r.MaxDuration); err != nil {
		return err
	} else if set {
		c.Reservation.MaxDuration = d
	}
	if d, set, err := parseDuration("ipam.reservation.reuseDelay", r.ReuseDelay); err != nil {
		return err
	} else if set {
		c.Reservation.ReuseDelay = d
	}
	if r.PoolFull != nil {
		switch p := PoolFullPolicy(*r.PoolFull); p {
		case PoolFullEvict, PoolFullFail:
			c.Reservation.PoolFull = p
		default:
			return fmt.Errorf("%w: ipam.reservation.poolFull=%q: want %q or %q", ErrInvalidConfig, contract.Clip(*r.PoolFull, contract.ClipLen), PoolFullEvict, PoolFullFail)
		}
	}
	if n, set, err := parseCount("ipam.reservation.maxPerNamespace", r.MaxPerNamespace, maxPerNamespaceLimit); err != nil {
		return err
	} else if set {
		c.Reservation.MaxPerNamespace = n
	}
	return nil
}

// RequestedIPs returns the requested addresses (CNI_ARGS IP, args.cni.ips and
// the ips capability) in netip form.
func (c *Config) RequestedIPs() []netip.Addr {
	var out []netip.Addr
	for _, ip := range c.IPArgs {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// whereIs names the top-level key whose value fails to decode ("ipam: "), for
// errors encoding/json reports without a field name (such as a bad IP).
func whereIs(stdin []byte) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(stdin, &top) != nil {
		return ""
	}
	for _, key := range []string{"ipam", "runtimeConfig", "args", "cni.dev/valid-attachments"} {
		if v, ok := top[key]; ok {
			b, _ := json.Marshal(map[string]json.RawMessage{key: v})
			if json.Unmarshal(b, new(netConf)) != nil {
				return key + ": "
			}
		}
	}
	return ""
}
