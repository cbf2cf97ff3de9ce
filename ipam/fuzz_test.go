package ipam

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation/fake"
)

// The parsers must never panic, and every rejection must be one of the
// package's classified errors (so the plugin returns a proper CNI code).

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"", "IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=b", "IP=10.0.0.1", "IP=fd00::1/64", "A", ";;", "K8S_POD_UID=" + strings.Repeat("x", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseArgs(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("%q: unclassified error %v", s, err)
			}
			return
		}
		if len(a.Namespace) > maxNamespaceLen || len(a.Name) > maxPodNameLen || strings.Contains(a.Name, "/") {
			t.Fatalf("%q: accepted out-of-bounds identity %+v", s, a)
		}
	})
}

func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"stickyip","subnet":"10.2.0.0/24"}}`,
		`{"cniVersion":"0.3.1","name":"n","ipam":{"type":"stickyip","ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"fd00::/64"}]],"reservation":{"maxDuration":"1h","poolFull":"fail"}}}`,
		`{"name":"n","ipam":{"subnet":"10.2.0.0/31"}}`,
		`{"name":"n","ipam":{"subnet":"10.2.0.0/24"},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"io.kubernetes.cri/reserved-ip-duration":"x"}}}`,
		`[]`, `{"ipam":null}`,
		`{"name":"n","ipam":{"subnet":"10.2.0.0/24","reservation":{"maxPerNamespace":3},"ipsAnnotation":{"namespaces":["a","kube-system"]}},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"stickyip.io/ips":"10.2.0.9"}}}`,
		`{"name":"n","ipam":{"subnet":"10.2.0.0/24","ipsAnnotation":{"namespaces":[]}},"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"stickyip.io/ips":"10.2.0.1"}}}`,
	} {
		f.Add([]byte(s), "IgnoreUnknown=1;K8S_POD_NAME=a")
	}
	f.Fuzz(func(t *testing.T, conf []byte, args string) {
		c, err := LoadConfig(conf, args)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if len(c.Ranges) == 0 || c.Name == "" {
			t.Fatalf("accepted a config without ranges or name: %+v", c)
		}
		// The annotation and identity paths must not panic either, and a
		// refused stickyip.io/ips is a classified error.
		_, _, _, _ = c.ReservationFor()
		// A pod name and a stickyip.io/identity value never give one identity.
		if w, err := c.Identity(); err == nil && !w.IsZero() {
			_, keyed := contract.IdentityKey(w.Name)
			if _, annotated := c.Annotations[contract.AnnotationIdentity]; keyed != annotated {
				t.Fatalf("identity %q from annotations %v", w.Name, c.Annotations)
			}
		}
		if _, err := c.AnnotatedIPs(); err != nil && !errors.Is(err, contract.ErrInvalidAnnotation) {
			t.Fatalf("AnnotatedIPs: unclassified error %v", err)
		}
		if c.Reservation.MaxPerNamespace < 0 || c.Reservation.MaxPerNamespace > maxPerNamespaceLimit {
			t.Fatalf("accepted maxPerNamespace %d", c.Reservation.MaxPerNamespace)
		}
	})
}

// FuzzRequestRules: whatever the ranges (rangeStart/rangeEnd over the
// network or broadcast address, a gateway anywhere) and whatever addresses
// are requested, the engine never grants a range's gateway, network or
// broadcast address nor one outside every range, dynamic allocation never
// hands one out, and every refusal is one of the engine's classified errors.
func FuzzRequestRules(f *testing.F) {
	for _, s := range [][2]string{
		{`{"subnet":"10.1.0.0/29"}`, "10.1.0.1"},
		{`{"subnet":"10.1.0.0/29","rangeStart":"10.1.0.0","rangeEnd":"10.1.0.7"}`, "10.1.0.7"},
		{`{"subnet":"10.1.0.0/29","gateway":"10.1.0.5"}`, "10.1.0.5,10.1.0.1"},
		{`{"ranges":[[{"subnet":"10.1.0.0/30"}],[{"subnet":"fd00::/126","rangeStart":"fd00::"}]]}`, "fd00::,10.1.0.2"},
		{`{"ranges":[[{"subnet":"10.1.0.0/30"},{"subnet":"10.1.0.4/30","gateway":"10.1.0.2"}]]}`, "10.1.0.2"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ipamJSON, requested string) {
		conf, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":`+ipamJSON+`}`), "")
		if err != nil || len(conf.Ranges) > 4 {
			return
		}
		for _, rs := range conf.Ranges {
			for _, r := range rs {
				if ones, bits := r.Subnet.Mask.Size(); bits-ones > 12 {
					return // keep the dynamic walk below short
				}
			}
		}
		ips, err := contract.ParseIPs(requested)
		if err != nil {
			return
		}
		w := &world{t: t, store: fake.New(), now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), dead: map[string]bool{}, conf: conf}
		w.eng = NewEngine(conf, Env{Now: func() time.Time { return w.now }, BootID: "boot-1"})
		w.eng.hostLocalDir = ""
		granted := func(recs []string) {
			for _, s := range recs {
				ip := netip.MustParseAddr(s)
				if why := w.eng.unassignables().why(ip); why != "" {
					t.Fatalf("granted %s, %s (ranges %s)", ip, why, rangesString(conf.Ranges))
				}
				if !slices.ContainsFunc(conf.Ranges, func(rs RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) }) {
					t.Fatalf("granted %s outside every range (%s)", ip, rangesString(conf.Ranges))
				}
			}
		}
		var req []string
		for _, ip := range ips {
			req = append(req, ip.String())
		}
		got, err := w.add("asked", anon(1), req...)
		switch {
		case err == nil:
			granted(got)
		case !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrIPUnavailable) && !errors.Is(err, ErrPoolExhausted):
			t.Fatalf("requesting %v: unclassified error %v", ips, err)
		}
		for i := range 64 {
			got, err := w.add(fmt.Sprint("dyn", i), anon(100+i))
			if err != nil {
				if !errors.Is(err, ErrPoolExhausted) {
					t.Fatalf("dynamic ADD: %v", err)
				}
				break
			}
			granted(got)
		}
	})
}
