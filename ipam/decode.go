package ipam

import (
	"bytes"
	"encoding/json"
	"net"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// Every CNI call is a new process, and encoding/json pays for each struct
// type the first time a process decodes it (its fields found by reflection,
// sorted and cached): for netConf, ipamConf, Range, the routes and the
// reservation block that was most of LoadConfig's cost (about 480,000
// instructions a call, callgrind). decodeNetConf and decodeReservation read
// the keys a network config holds with encoding/json's token reader instead
// (json.Decoder.Token: no reflection, and strings unquoted by the same code
// as json.Unmarshal), and hand a value of any other shape back to
// json.Unmarshal. Held to json.Unmarshal by TestDecodeNetConf and
// FuzzDecodeNetConf.

// decodeNetConf sets raw as json.Unmarshal(stdin, raw) does, for a raw that
// is zero. It returns false, when it cannot tell what json.Unmarshal would
// do without it, having perhaps set part of raw: the input is not valid
// JSON or not an object; a key appears twice in an object it decodes, or
// differs from a key it knows only in case (json.Unmarshal matches keys
// case-insensitively); a value is null or of another kind than the key's,
// or does not parse (an address, a subnet), or a route has more than dst
// and gw. The caller then decodes with json.Unmarshal, which gives the same
// result or the error to report. Values of keys it does not know are
// skipped; args, cni.dev/valid-attachments and the ipRanges and ips
// capabilities are decoded by json.Decoder.Decode, as json.Unmarshal
// decodes them.
func decodeNetConf(stdin []byte, raw *netConf) bool {
	if !json.Valid(stdin) {
		return false
	}
	t := tokens{json.NewDecoder(bytes.NewReader(stdin))}
	return t.object([]string{"cniVersion", "name", "ipam", "runtimeConfig", "args", "cni.dev/valid-attachments"}, func(key string) bool {
		switch key {
		case "cniVersion":
			return t.str(&raw.CNIVersion)
		case "name":
			return t.str(&raw.Name)
		case "ipam":
			raw.IPAM = &ipamConf{}
			return t.ipam(raw.IPAM)
		case "runtimeConfig":
			return t.runtimeConfig(raw)
		case "args":
			return t.decode(&raw.Args)
		default: // cni.dev/valid-attachments
			return t.decode(&raw.ValidAttachments)
		}
	})
}

// decodeReservation sets r as decodeBlock does for the ipam.reservation
// block, for an r that is zero; false as for decodeNetConf, and for a key
// it does not know (decodeBlock refuses it, with the error to report).
func decodeReservation(block json.RawMessage, r *rawReservation) bool {
	t := tokens{json.NewDecoder(bytes.NewReader(block))}
	keys := []string{"maxDuration", "reuseDelay", "poolFull", "maxPerNamespace"}
	strict := func(key string) bool {
		switch key {
		case "maxDuration":
			return t.decode(&r.MaxDuration)
		case "reuseDelay":
			return t.decode(&r.ReuseDelay)
		case "poolFull":
			r.PoolFull = new(string)
			return t.str(r.PoolFull)
		case "maxPerNamespace":
			return t.decode(&r.MaxPerNamespace)
		}
		return false // unknown: decodeBlock's error
	}
	return json.Valid(block) && t.objectOf(keys, strict, true)
}

// tokens reads a valid JSON document (json.Valid) token by token.
type tokens struct{ dec *json.Decoder }

// object reads an object, calling field for each key among keys (exactly)
// and skipping the values of other keys.
func (t tokens) object(keys []string, field func(key string) bool) bool {
	return t.objectOf(keys, field, false)
}

// objectOf is object; with unknown, keys not among keys go to field too.
// A key seen twice, or one among keys but for case, fails.
func (t tokens) objectOf(keys []string, field func(key string) bool, unknown bool) bool {
	if !t.delim('{') {
		return false
	}
	var seen []string
	for t.dec.More() {
		var key string
		if !t.str(&key) || slices.Contains(seen, key) {
			return false
		}
		seen = append(seen, key)
		known := slices.Contains(keys, key)
		if !known && slices.ContainsFunc(keys, func(k string) bool { return strings.EqualFold(k, key) }) {
			return false
		}
		switch {
		case known || unknown:
			if !field(key) {
				return false
			}
		default:
			var skip json.RawMessage
			if !t.decode(&skip) {
				return false
			}
		}
	}
	return t.delim('}')
}

// array reads an array, calling elem for each element; an empty array
// calls elem never.
func (t tokens) array(elem func() bool) bool {
	if !t.delim('[') {
		return false
	}
	for t.dec.More() {
		if !elem() {
			return false
		}
	}
	return t.delim(']')
}

func (t tokens) delim(want json.Delim) bool {
	tok, err := t.dec.Token()
	d, ok := tok.(json.Delim)
	return err == nil && ok && d == want
}

// str reads a string (not null) into s.
func (t tokens) str(s *string) bool {
	tok, err := t.dec.Token()
	v, ok := tok.(string)
	*s = v
	return err == nil && ok
}

// decode reads the next value into v with encoding/json, as json.Unmarshal
// decodes a field of v's type.
func (t tokens) decode(v any) bool { return t.dec.Decode(v) == nil }

// ip reads an address as net.IP's UnmarshalText does ("" is nil).
func (t tokens) ip(ip *net.IP) bool {
	var s string
	if !t.str(&s) {
		return false
	}
	if s == "" {
		*ip = nil
		return true
	}
	*ip = net.ParseIP(s)
	return *ip != nil
}

// subnet reads a subnet as types.IPNet's UnmarshalJSON does.
func (t tokens) subnet(n *types.IPNet) bool {
	var s string
	if !t.str(&s) {
		return false
	}
	p, err := types.ParseCIDR(s)
	if err != nil {
		return false
	}
	*n = types.IPNet(*p)
	return true
}

// rangeKeys are Range's keys, in ipamConf (the legacy single range) and in
// each range of a set.
var rangeKeys = []string{"rangeStart", "rangeEnd", "subnet", "gateway"}

// rangeField reads the value of one of rangeKeys into r.
func (t tokens) rangeField(r *Range, key string) bool {
	switch key {
	case "rangeStart":
		return t.ip(&r.RangeStart)
	case "rangeEnd":
		return t.ip(&r.RangeEnd)
	case "gateway":
		return t.ip(&r.Gateway)
	default: // subnet
		return t.subnet(&r.Subnet)
	}
}

func (t tokens) ipam(c *ipamConf) bool {
	keys := append([]string{"routes", "dataDir", "resolvConf", "ranges", "hostLocalDataDir", "logFile",
		"lockTimeout", "holderWait", "newStoreWait", "reservation", "ipsAnnotation"}, rangeKeys...)
	return t.object(keys, func(key string) bool {
		switch key {
		case "routes":
			c.Routes = []*types.Route{}
			return t.array(func() bool {
				r := &types.Route{}
				c.Routes = append(c.Routes, r)
				return t.route(r)
			})
		case "dataDir":
			return t.str(&c.DataDir)
		case "resolvConf":
			return t.str(&c.ResolvConf)
		case "ranges":
			c.Ranges = []RangeSet{}
			return t.array(func() bool {
				set := RangeSet{}
				ok := t.array(func() bool {
					set = append(set, Range{})
					return t.object(rangeKeys, func(key string) bool { return t.rangeField(&set[len(set)-1], key) })
				})
				c.Ranges = append(c.Ranges, set)
				return ok
			})
		case "hostLocalDataDir":
			c.HostLocalDataDir = new(string)
			return t.str(c.HostLocalDataDir)
		case "logFile":
			return t.str(&c.LogFile)
		case "lockTimeout":
			return t.decode(&c.LockTimeout)
		case "holderWait":
			return t.decode(&c.HolderWait)
		case "newStoreWait":
			return t.decode(&c.NewStoreWait)
		case "reservation":
			return t.decode(&c.Reservation)
		case "ipsAnnotation":
			return t.decode(&c.IPsAnnotation)
		default:
			return t.rangeField(&c.Range, key)
		}
	})
}

// route reads a route holding dst and gw only, as types.Route's
// UnmarshalJSON does.
func (t tokens) route(r *types.Route) bool {
	return t.object([]string{"dst", "gw", "mtu", "advmss", "priority", "table", "scope"}, func(key string) bool {
		switch key {
		case "dst":
			var n types.IPNet
			if !t.subnet(&n) {
				return false
			}
			r.Dst = net.IPNet(n)
			return true
		case "gw":
			return t.ip(&r.GW)
		}
		return false // numbers: json.Unmarshal's rules
	})
}

func (t tokens) runtimeConfig(raw *netConf) bool {
	rc := &raw.RuntimeConfig
	return t.object([]string{"ipRanges", "ips", "io.kubernetes.cri.pod-annotations"}, func(key string) bool {
		switch key {
		case "ipRanges":
			return t.decode(&rc.IPRanges)
		case "ips":
			return t.decode(&rc.IPs)
		default:
			rc.Annotations = map[string]string{}
			return t.objectOf(nil, func(k string) bool {
				var v string
				ok := t.str(&v)
				rc.Annotations[k] = v
				return ok
			}, true)
		}
	})
}
