package cni

import (
	"io"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// PrintResult writes an ADD's result to w as types.PrintResult(res,
// version) writes it to stdout, byte for byte. The CNI library converts the
// result to the config's version and prints it with json.MarshalIndent;
// for 1.x it first marshals the result, unmarshals that into a map and
// marshals the map again (to drop an empty "dns"). Each is encoding/json by
// reflection, whose first use of each type in a process is its costly part
// (about 0.1 ms of every ADD here), and every CNI call is a new process.
//
// encodeResult writes the results stickyip makes in the two formats
// runtimes ask for (1.0.0 and 1.1.0; 0.3.0, 0.3.1 and 0.4.0: flannel's
// conflists say 0.3.1) without reflection; any other result or version is
// printed by the CNI library. Held to it by TestPrintResult and
// FuzzPrintResult.
func PrintResult(w io.Writer, res *current.Result, version string) error {
	if b, ok := encodeResult(res, version); ok {
		_, err := w.Write(b)
		return err
	}
	r, err := res.GetAsVersion(version)
	if err != nil {
		return err
	}
	return r.PrintTo(w)
}

// encodeResult returns what PrintResult writes, and false when it cannot
// write it itself: a version other than 0.3.0, 0.3.1, 0.4.0, 1.0.0 and
// 1.1.0, interfaces, an address with an interface index, a route with more
// than dst and gw, or a string that is not printable ASCII free of JSON's
// and HTML's special characters (encoding/json escapes those, and the 1.x
// round trip rewrites invalid UTF-8).
func encodeResult(res *current.Result, version string) ([]byte, bool) {
	v1 := version == "1.0.0" || version == "1.1.0"
	if !v1 && version != "0.3.0" && version != "0.3.1" && version != "0.4.0" || len(res.Interfaces) > 0 {
		return nil, false
	}
	e := encoder{ok: true}
	e.open('{')
	e.key("cniVersion")
	e.str(version)
	dns := res.DNS
	hasDNS := !dns.IsEmpty()
	if v1 && hasDNS { // 1.x: every object's keys in order, as the map prints them
		e.key("dns")
		e.dns(dns, true)
	}
	if len(res.IPs) > 0 {
		e.key("ips")
		e.open('[')
		for _, ip := range res.IPs {
			if ip == nil || ip.Interface != nil {
				return nil, false
			}
			e.elem()
			e.open('{')
			if !v1 { // convertTo04x
				e.key("version")
				e.str(map[bool]string{true: "4", false: "6"}[ip.Address.IP.To4() != nil])
			}
			e.key("address")
			e.str(ip.Address.String())
			e.ip("gateway", ip.Gateway)
			e.close('}')
		}
		e.close(']')
	}
	if len(res.Routes) > 0 {
		e.key("routes")
		e.open('[')
		for _, r := range res.Routes {
			if r == nil || r.MTU != 0 || r.AdvMSS != 0 || r.Priority != 0 || r.Table != nil || r.Scope != nil {
				return nil, false
			}
			e.elem()
			e.open('{')
			e.key("dst")
			e.str((*net.IPNet)(&r.Dst).String())
			e.ip("gw", r.GW)
			e.close('}')
		}
		e.close(']')
	}
	if !v1 { // types040: the struct's "dns", always
		e.key("dns")
		e.dns(dns, false)
	}
	e.close('}')
	return e.b, e.ok
}

// encoder writes JSON as json.MarshalIndent(v, "", "    ") lays it out.
type encoder struct {
	b     []byte
	depth int
	empty bool // the innermost open object or array has no member yet
	ok    bool // false once a string needed escaping
}

func (e *encoder) open(c byte) {
	e.b = append(e.b, c)
	e.depth++
	e.empty = true
}

// member starts a member of the open object or array on a line of its own.
func (e *encoder) member() {
	if !e.empty {
		e.b = append(e.b, ',')
	}
	e.empty = false
	e.b = append(e.b, '\n')
	for range e.depth {
		e.b = append(e.b, "    "...)
	}
}

func (e *encoder) key(k string) {
	e.member()
	e.str(k)
	e.b = append(e.b, ": "...)
}

func (e *encoder) elem() { e.member() }

// close ends the open object or array; an empty one stays "{}" or "[]".
func (e *encoder) close(c byte) {
	e.depth--
	if !e.empty {
		e.b = append(e.b, '\n')
		for range e.depth {
			e.b = append(e.b, "    "...)
		}
	}
	e.b = append(e.b, c)
	e.empty = false
}

// str writes s quoted, when it needs no escape.
func (e *encoder) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || strings.IndexByte(`"\<>&`, c) >= 0 {
			e.ok = false
		}
	}
	e.b = append(append(append(e.b, '"'), s...), '"')
}

// ip writes an address under key, as net.IP's MarshalText does: none when
// it is empty (omitempty); one of another length is its error.
func (e *encoder) ip(key string, ip net.IP) {
	switch len(ip) {
	case 0:
	case net.IPv4len, net.IPv6len:
		e.key(key)
		e.str(ip.String())
	default:
		e.ok = false
	}
}

func (e *encoder) strs(key string, list []string) {
	if len(list) == 0 {
		return
	}
	e.key(key)
	e.open('[')
	for _, s := range list {
		e.elem()
		e.str(s)
	}
	e.close(']')
}

// dns writes the DNS settings: sorted, the keys as the 1.x map prints
// them, else in types.DNS's field order.
func (e *encoder) dns(d types.DNS, sorted bool) {
	e.open('{')
	domain := func() {
		if d.Domain != "" {
			e.key("domain")
			e.str(d.Domain)
		}
	}
	if sorted {
		domain()
		e.strs("nameservers", d.Nameservers)
		e.strs("options", d.Options)
		e.strs("search", d.Search)
	} else {
		e.strs("nameservers", d.Nameservers)
		domain()
		e.strs("search", d.Search)
		e.strs("options", d.Options)
	}
	e.close('}')
}
