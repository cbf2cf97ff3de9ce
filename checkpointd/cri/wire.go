package cri

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The CRI messages checkpointd reads, decoded field by field from the
// protobuf wire format (k8s.io/cri-api's api.proto, runtime.v1: the field
// numbers below are its). Fields it does not read are skipped, as any
// protobuf reader does with fields it does not know.

// fields calls f with the number and value of each field of message b that
// it reads: v for a length-delimited field (a string, bytes, a message, a
// map entry), x for a varint field (an integer, a bool, an enum) whose
// number is among varints. A field of another wire type than the one it is
// read as is skipped, as the protobuf library skips it (it keeps it among
// the unknown fields), and so is every field of another wire type.
func fields(b []byte, f func(num protowire.Number, v []byte, x uint64) error, varints ...protowire.Number) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if varint := slices.Contains(varints, num); typ != protowire.BytesType && !varint || typ != protowire.VarintType && varint {
			continue
		}
		if err := f(num, v, x); err != nil {
			return fmt.Errorf("field %d: %w", num, err)
		}
	}
	return nil
}

// mapEntry adds the map<string, string> entry b (key 1, value 2) to *m.
func mapEntry(m *map[string]string, b []byte) error {
	var k, v string
	err := fields(b, func(num protowire.Number, b []byte, _ uint64) error {
		switch num {
		case 1:
			k = string(b)
		case 2:
			v = string(b)
		}
		return nil
	})
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
	return err
}

// decodeSandboxes reads a ListPodSandboxResponse (items = 1).
func decodeSandboxes(b []byte) ([]Sandbox, error) {
	var out []Sandbox
	err := fields(b, func(num protowire.Number, b []byte, _ uint64) error {
		if num != 1 {
			return nil
		}
		s, err := decodeSandbox(b)
		out = append(out, s)
		return err
	})
	return out, err
}

// decodeSandbox reads a PodSandbox: id 1, metadata 2, state 3 (0, the
// default, is SANDBOX_READY), created_at 4 (ns), labels 5, annotations 6.
func decodeSandbox(b []byte) (Sandbox, error) {
	s := Sandbox{Ready: true}
	var created int64
	err := fields(b, func(num protowire.Number, b []byte, x uint64) error {
		switch num {
		case 1:
			s.ID = string(b)
		case 2:
			return decodeMetadata(&s, b)
		case 3:
			s.Ready = x == 0
		case 4:
			created = int64(x)
		case 5:
			return mapEntry(&s.Labels, b)
		case 6:
			return mapEntry(&s.Annotations, b)
		}
		return nil
	}, 3, 4)
	s.CreatedAt = time.Unix(0, created)
	return s, err
}

// decodeMetadata reads a PodSandboxMetadata: name 1, uid 2, namespace 3.
func decodeMetadata(s *Sandbox, b []byte) error {
	return fields(b, func(num protowire.Number, b []byte, _ uint64) error {
		switch num {
		case 1:
			s.Name = string(b)
		case 2:
			s.UID = string(b)
		case 3:
			s.Namespace = string(b)
		}
		return nil
	})
}

// encodeStatusRequest is a PodSandboxStatusRequest: pod_sandbox_id 1,
// verbose 2.
func encodeStatusRequest(id string, verbose bool) []byte {
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, id)
	if verbose {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// statusAnswer is what checkpointd reads of a PodSandboxStatusResponse.
type statusAnswer struct {
	hasStatus   bool
	ip          string   // status.network.ip
	moreIPs     []string // status.network.additional_ips[].ip
	hostNetwork bool     // status.linux.namespaces.options.network == NODE
	annotations map[string]string
	info        map[string]string // the verbose information (only the entries asked for)
}

// nodeNamespace is NamespaceMode NODE: the sandbox uses the node's namespace.
const nodeNamespace = 2

// decodeStatus reads a PodSandboxStatusResponse (status 1, info 2), keeping
// of info only the keys in keep.
func decodeStatus(b []byte, keep ...string) (statusAnswer, error) {
	var a statusAnswer
	err := fields(b, func(num protowire.Number, b []byte, _ uint64) error {
		switch num {
		case 1:
			a.hasStatus = true
			return a.sandboxStatus(b)
		case 2:
			var e map[string]string
			if err := mapEntry(&e, b); err != nil {
				return err
			}
			for k, v := range e {
				for _, want := range keep {
					if k == want {
						if a.info == nil {
							a.info = map[string]string{}
						}
						a.info[k] = v
					}
				}
			}
		}
		return nil
	})
	return a, err
}

// sandboxStatus reads a PodSandboxStatus: network 5 (ip 1, additional_ips
// 2 of PodIP, ip 1), linux 6 (namespaces 1, options 2, network 1),
// annotations 8.
func (a *statusAnswer) sandboxStatus(b []byte) error {
	return fields(b, func(num protowire.Number, b []byte, _ uint64) error {
		switch num {
		case 5:
			return fields(b, func(num protowire.Number, b []byte, _ uint64) error {
				switch num {
				case 1:
					a.ip = string(b)
				case 2:
					// Every PodIP is an entry, as the library reads it,
					// even one without an ip field (empty).
					a.moreIPs = append(a.moreIPs, "")
					last := len(a.moreIPs) - 1
					return fields(b, func(num protowire.Number, b []byte, _ uint64) error {
						if num == 1 {
							a.moreIPs[last] = string(b)
						}
						return nil
					})
				}
				return nil
			})
		case 6:
			return nested(b, []protowire.Number{1, 2, 1}, func(x uint64) { a.hostNetwork = x == nodeNamespace })
		case 8:
			return mapEntry(&a.annotations, b)
		}
		return nil
	})
}

// nested follows the path of message fields in b down to a varint field
// and calls f with its value.
func nested(b []byte, path []protowire.Number, f func(uint64)) error {
	if len(path) == 0 {
		return errors.New("empty path")
	}
	var varints []protowire.Number
	if len(path) == 1 {
		varints = path // the end of the path is a varint, the fields above it messages
	}
	return fields(b, func(num protowire.Number, v []byte, x uint64) error {
		switch {
		case num != path[0]:
			return nil
		case len(path) == 1:
			f(x)
			return nil
		default:
			return nested(v, path[1:], f)
		}
	}, varints...)
}
