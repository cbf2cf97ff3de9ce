package ipam

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestParseResolvConf: the DNS a pod gets is what resolv.conf says, as
// host-local reads it: comments (# and ;) and blank lines skipped, a bare
// "domain" ignored, every value of a repeated key kept; a file that cannot
// be read, or has a line too long to read, fails the ADD naming
// ipam.resolvConf.
func TestParseResolvConf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	conf := write("resolv.conf", `# a comment
; another
nameserver 10.96.0.10

domain
domain cluster.local
search ns.svc.cluster.local svc.cluster.local
search cluster.local
options ndots:5 edns0
nameserver fd00::a
sortlist 10.0.0.0/8
`)
	dns, err := ParseResolvConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	want := &types.DNS{Nameservers: []string{"10.96.0.10", "fd00::a"}, Domain: "cluster.local",
		Search: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5", "edns0"}}
	if !reflect.DeepEqual(dns, want) {
		t.Fatalf("DNS %+v, want %+v", dns, want)
	}

	for name, path := range map[string]string{
		"missing":  filepath.Join(dir, "none"),
		"too long": write("long.conf", "search "+strings.Repeat("a", 70000)+"\n"),
	} {
		if _, err := ParseResolvConf(path); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ipam.resolvConf") {
			t.Errorf("%s: %v, want a config error naming ipam.resolvConf", name, err)
		}
	}
}
