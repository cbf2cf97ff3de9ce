package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
)

// TestResolveStaticPodDir: --kubelet-config's staticPodPath wins over
// --static-pod-dir; without it --static-pod-dir stands; a kubelet config that
// cannot be read is an error, never a silent fallback.
func TestResolveStaticPodDir(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(kc, []byte("kind: KubeletConfiguration\nstaticPodPath: /srv/manifests\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
		err  bool
	}{
		{Config{StaticPodDir: "/etc/kubernetes/manifests"}, "/etc/kubernetes/manifests", false},
		{Config{StaticPodDir: "/etc/kubernetes/manifests", KubeletConfig: kc}, "/srv/manifests", false},
		{Config{StaticPodDir: "/etc/kubernetes/manifests", KubeletConfig: kc + ".missing"}, "", true},
	} {
		got, err := tc.cfg.ResolveStaticPodDir()
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%+v: %q, %v; want %q, error %v", tc.cfg, got, err, tc.want, tc.err)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Config{NodeName: "n", CheckpointDir: "/c", StaticPodDir: "/s", VolumeDir: "/v", Grace: time.Minute,
		Interval: time.Second, Volumes: "copy", Reservation: "10m", RestoreTimeout: time.Minute, AllowNamespaces: "kube-system"}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"--node-name":           func(c *Config) { c.NodeName = "" },
		"--grace-period":        func(c *Config) { c.Grace = 0 },
		"--volumes":             func(c *Config) { c.Volumes = "maybe" },
		"--restore-reservation": func(c *Config) { c.Reservation = "soon" },
		"--static-pod-dir":      func(c *Config) { c.StaticPodDir = "" },
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want one naming the flag", name, err)
		}
	}
	c := good
	c.Reservation = "30"
	if err := c.Validate(); err != nil {
		t.Errorf("integer minutes rejected: %v", err)
	}
	// checkpointd once accepted values the plugin refuses, so the
	// restored copy never got a network. Every value the plugin's parser
	// refuses must be refused here, naming the flag.
	for _, v := range []string{"-5m", "-5", "1e309", "1.5", " ", strings.Repeat("9", 65)} {
		c.Reservation = v
		_, perr := contract.ParseReservedDuration(v)
		err := c.Validate()
		if perr == nil || err == nil || !strings.Contains(err.Error(), "--restore-reservation") {
			t.Errorf("--restore-reservation=%q: Validate err %v (plugin parser: %v); want both to refuse it", v, err, perr)
		}
	}
}
