package ipam

import (
	"errors"
	"strings"
	"testing"
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
		// The annotation and identity paths must not panic either.
		_, _, _, _ = c.ReservationFor()
		_, _, _, _ = c.Identity()
	})
}
