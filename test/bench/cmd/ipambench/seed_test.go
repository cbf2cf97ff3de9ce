package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostLocalPool(t *testing.T) {
	tests := []struct {
		subnet      string
		n           int
		first, last string
	}{
		{"10.244.0.0/16", 65533, "10.244.0.2", "10.244.255.254"},
		{"192.168.1.0/24", 253, "192.168.1.2", "192.168.1.254"},
	}
	for _, tt := range tests {
		t.Run(tt.subnet, func(t *testing.T) {
			_, subnet, _ := net.ParseCIDR(tt.subnet)
			pool := hostLocalPool(subnet)
			if len(pool) != tt.n || pool[0].String() != tt.first || pool[len(pool)-1].String() != tt.last {
				t.Errorf("pool = %d addresses %s..%s, want %d %s..%s", len(pool), pool[0], pool[len(pool)-1], tt.n, tt.first, tt.last)
			}
		})
	}
}

func TestSeedHostLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net")
	_, subnet, _ := net.ParseCIDR("192.168.7.0/24")
	seeded, free, err := seedHostLocal(dir, subnet, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(seeded) != 253-5 || len(free) != 5 {
		t.Fatalf("seeded %d, free %d; want 248, 5", len(seeded), len(free))
	}
	for _, ip := range free {
		if seeded[ip.String()] {
			t.Errorf("%s is both free and seeded", ip)
		}
		if _, err := os.Stat(filepath.Join(dir, ip.String())); err == nil {
			t.Errorf("free address %s has a host-local file", ip)
		}
	}
	// Free addresses are spread over the pool, not bunched at one end.
	if free[0].To4()[3] > 60 || free[4].To4()[3] < 190 {
		t.Errorf("free addresses %v are not spread over the pool", free)
	}
	b, err := os.ReadFile(filepath.Join(dir, "192.168.7.2"))
	if err != nil {
		t.Fatal(err)
	}
	id, ifname, ok := strings.Cut(string(b), "\r\n")
	if !ok || len(id) != 64 || ifname != "eth0" {
		t.Errorf("host-local file holds %q, want 64-hex-digit ID, CRLF, eth0", b)
	}
	last, err := os.ReadFile(filepath.Join(dir, "last_reserved_ip.0"))
	if err != nil || string(last) != free[0].String() {
		t.Errorf("last_reserved_ip.0 = %q (%v), want %s", last, err, free[0])
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 248+1 {
		t.Errorf("%d files in the network dir, want 249", len(entries))
	}
}

func TestStdin(t *testing.T) {
	p := newPod("x", 1)
	p.annotations[reservationAnnotation] = "5"
	for _, kind := range []string{kindHostLocal, kindStickyIP} {
		t.Run(kind, func(t *testing.T) {
			tg := &target{kind: kind, network: "n", subnet: "10.1.0.0/16", dir: "/d", emptyDir: "/e"}
			var conf struct {
				Name string `json:"name"`
				IPAM struct {
					Type             string `json:"type"`
					DataDir          string `json:"dataDir"`
					HostLocalDataDir string `json:"hostLocalDataDir"`
					Ranges           [][]struct {
						Subnet string `json:"subnet"`
					} `json:"ranges"`
				} `json:"ipam"`
				RuntimeConfig map[string]map[string]string `json:"runtimeConfig"`
			}
			if err := json.Unmarshal(tg.stdin(p), &conf); err != nil {
				t.Fatal(err)
			}
			if conf.Name != "n" || conf.IPAM.Type != kind || conf.IPAM.DataDir != "/d" || conf.IPAM.Ranges[0][0].Subnet != "10.1.0.0/16" {
				t.Errorf("config = %+v", conf)
			}
			// stickyip must never import the machine's real host-local data.
			if kind == kindStickyIP && conf.IPAM.HostLocalDataDir != "/e" {
				t.Errorf("hostLocalDataDir = %q, want the target's empty dir", conf.IPAM.HostLocalDataDir)
			}
			if got := conf.RuntimeConfig["io.kubernetes.cri.pod-annotations"][reservationAnnotation]; got != "5" {
				t.Errorf("annotation in runtimeConfig = %q, want 5", got)
			}
		})
	}
}

func TestParseIPs(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{"dual stack", `{"cniVersion":"1.0.0","ips":[{"address":"10.1.0.2/16"},{"address":"fd00::2/64"}]}`, []string{"10.1.0.2", "fd00::2"}, false},
		{"no ips", `{"cniVersion":"1.0.0"}`, nil, false},
		{"bad address", `{"ips":[{"address":"10.1.0.2"}]}`, nil, true},
		{"not json", `oops`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ips, err := parseIPs([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			var got []string
			for _, ip := range ips {
				got = append(got, ip.String())
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("ips = %v, want %v", got, tt.want)
			}
		})
	}
}
