package ipam

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
)

func TestLoadConfigHostLocalCompatible(t *testing.T) {
	for _, tc := range []struct {
		name, ipam string
		ranges     int
		start, gw  string
	}{
		{"legacy single range", `{"type":"stickyip","subnet":"10.2.0.0/24","rangeStart":"10.2.0.10","rangeEnd":"10.2.0.20","gateway":"10.2.0.254"}`, 1, "10.2.0.10", "10.2.0.254"},
		{"ranges dual-stack", `{"type":"stickyip","ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"fd00::/64"}]]}`, 2, "10.2.0.1", "10.2.0.1"},
		{"range set of two", `{"type":"stickyip","ranges":[[{"subnet":"10.2.0.0/24"},{"subnet":"10.3.0.0/24"}]]}`, 1, "10.2.0.1", "10.2.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfig([]byte(`{"cniVersion":"0.4.0","name":"n","ipam":`+tc.ipam+`}`), "")
			if err != nil {
				t.Fatal(err)
			}
			r := c.Ranges[0][0]
			if len(c.Ranges) != tc.ranges || r.RangeStart.String() != tc.start || r.Gateway.String() != tc.gw {
				t.Fatalf("ranges %d start %s gw %s", len(c.Ranges), r.RangeStart, r.Gateway)
			}
			if c.DataDir != contract.DefaultDataDir || c.HostLocalDataDir != contract.DefaultHostLocalDataDir || c.LockTimeout != contract.DefaultLockTimeout ||
				c.Reservation.MaxDuration != contract.DefaultMaxDuration || c.Reservation.PoolFull != PoolFullEvict {
				t.Fatalf("defaults not applied: %+v", c)
			}
		})
	}
}

func TestLoadConfigStickyKeysAndRequests(t *testing.T) {
	c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n",
		"ipam":{"type":"stickyip","subnet":"10.2.0.0/24","dataDir":"/d","hostLocalDataDir":"","logFile":"/l","lockTimeout":"3s",
		        "reservation":{"maxDuration":"2h","poolFull":"fail"}},
		"args":{"cni":{"ips":["10.2.0.7"]}},
		"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"io.kubernetes.cri/reserved-ip-duration":"180"}}}`),
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web;K8S_POD_UID=u1;IP=10.2.0.9;OTHER=x")
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/d" || c.HostLocalDataDir != "" || c.LogFile != "/l" || c.LockTimeout != 3*time.Second ||
		c.Reservation.MaxDuration != 2*time.Hour || c.Reservation.PoolFull != PoolFullFail {
		t.Fatalf("keys not read: %+v", c)
	}
	if req := c.RequestedIPs(); len(req) != 2 || req[0].String() != "10.2.0.9" || req[1].String() != "10.2.0.7" {
		t.Fatalf("requested IPs %v", req)
	}
	d, asked, clamped, err := c.ReservationFor()
	if err != nil || d != 2*time.Hour || asked != 3*time.Hour || !clamped {
		t.Fatalf("180 minutes under a 2h maximum: %v %v %v %v", d, asked, clamped, err)
	}
	if w, _ := c.Identity(); w != (Who{Namespace: "ns", Name: "web", Pod: "web"}) {
		t.Fatalf("identity %+v", w)
	}
}

func TestLoadConfigErrorsNameTheKey(t *testing.T) {
	base := func(ipam string) string { return `{"cniVersion":"1.0.0","name":"n","ipam":` + ipam + `}` }
	for _, tc := range []struct{ name, conf, args, want string }{
		{"malformed json", `{"name":`, "", "network config"},
		{"no name", `{"cniVersion":"1.0.0","ipam":{"type":"stickyip","subnet":"10.2.0.0/24"}}`, "", `"name"`},
		{"no ipam", `{"cniVersion":"1.0.0","name":"n"}`, "", `"ipam"`},
		{"no ranges", base(`{"type":"stickyip"}`), "", "no IP ranges"},
		{"overlapping ranges", base(`{"type":"stickyip","ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"10.2.0.0/25"}]]}`), "", "overlaps"},
		{"/32", base(`{"type":"stickyip","subnet":"10.2.0.1/32"}`), "", "too small"},
		{"bad gateway", base(`{"type":"stickyip","subnet":"10.2.0.0/24","gateway":"nope"}`), "", "ipam"},
		{"unknown reservation key", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxDuraton":"1h"}}`), "", "maxDuraton"},
		{"bad maxDuration", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxDuration":"forever"}}`), "", "forever"},
		{"bad maxDuration names the key", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxDuration":"-1h"}}`), "", "ipam.reservation.maxDuration"},
		{"bad lockTimeout names the key", base(`{"type":"stickyip","subnet":"10.2.0.0/24","lockTimeout":"soon"}`), "", "ipam.lockTimeout"},
		{"lockTimeout not a string", base(`{"type":"stickyip","subnet":"10.2.0.0/24","lockTimeout":5}`), "", "ipam.lockTimeout"},
		{"bad poolFull", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"poolFull":"panic"}}`), "", "poolFull"},
		{"zero lockTimeout", base(`{"type":"stickyip","subnet":"10.2.0.0/24","lockTimeout":"0s"}`), "", "lockTimeout"},
		{"maxPerNamespace not a number", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxPerNamespace":"ten"}}`), "", "ipam.reservation.maxPerNamespace"},
		{"maxPerNamespace negative", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxPerNamespace":-1}}`), "", "ipam.reservation.maxPerNamespace"},
		{"maxPerNamespace fraction", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxPerNamespace":1.5}}`), "", "got 1.5"},
		{"maxPerNamespace huge", base(`{"type":"stickyip","subnet":"10.2.0.0/24","reservation":{"maxPerNamespace":100000}}`), "", "100000"},
		{"unknown ipsAnnotation key", base(`{"type":"stickyip","subnet":"10.2.0.0/24","ipsAnnotation":{"namespace":["a"]}}`), "", `ipam.ipsAnnotation: json: unknown field "namespace"`},
		{"ipsAnnotation not an object", base(`{"type":"stickyip","subnet":"10.2.0.0/24","ipsAnnotation":["a"]}`), "", "ipam.ipsAnnotation"},
		{"namespaces not a list", base(`{"type":"stickyip","subnet":"10.2.0.0/24","ipsAnnotation":{"namespaces":"infra"}}`), "", "ipam.ipsAnnotation.namespaces"},
		{"namespace not a name", base(`{"type":"stickyip","subnet":"10.2.0.0/24","ipsAnnotation":{"namespaces":["infra","Kube_System"]}}`), "", `ipam.ipsAnnotation.namespaces: "Kube_System"`},
		{"unknown CNI_ARGS", base(`{"type":"stickyip","subnet":"10.2.0.0/24"}`), "FOO=1", "FOO"},
		{"bad IP arg", base(`{"type":"stickyip","subnet":"10.2.0.0/24"}`), "IP=10.2.0", "IP="},
		{"long pod name", base(`{"type":"stickyip","subnet":"10.2.0.0/24"}`), "K8S_POD_NAME=" + strings.Repeat("a", 254), "K8S_POD_NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig([]byte(tc.conf), tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("err %v is neither ErrInvalidConfig nor ErrInvalidArgs", err)
			}
		})
	}
}

func TestCheckpointOfOnlyForStaticPods(t *testing.T) {
	conf := func(src string) *Config {
		ann := `"stickyip.io/checkpoint-of":"prod/db-0"`
		if src != "" {
			ann += `,"kubernetes.io/config.source":"` + src + `"`
		}
		c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"stickyip","subnet":"10.2.0.0/24"},
			"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{`+ann+`}}}`), "K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0-node1")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// The copy stands for its parent: identity and pod (what placement
	// publishes) are the parent's, not the mirror name db-0-node1.
	if w, _ := conf("file").Identity(); w != (Who{Namespace: "prod", Name: "db-0", Pod: "db-0", ViaCheckpoint: true}) {
		t.Fatalf("static pod: identity %+v", w)
	}
	for _, src := range []string{"", "api"} {
		if w, _ := conf(src).Identity(); w != (Who{Namespace: "prod", Name: "db-0-node1", Pod: "db-0-node1"}) {
			t.Fatalf("source %q: identity %+v; an API pod must not claim another pod's IP", src, w)
		}
	}
}

// Found by FuzzPluginInput: a 2,800-byte bad subnet was echoed whole in the error.
func TestLoadConfigErrorsStayShort(t *testing.T) {
	long := "10.250" + strings.Repeat("\r", 3000) + ".0.0/24"
	for _, conf := range []string{
		`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"` + strings.ReplaceAll(long, "\r", `\r`) + `"}}`,
		`{"cniVersion":"1.0.0","name":"n","ipam":{"ranges":[[{"subnet":"10.2.0.0/24","gateway":"` + strings.Repeat("9", 3000) + `"}]]}}`,
	} {
		_, err := LoadConfig([]byte(conf), "")
		if err == nil || len(err.Error()) > 500 || !strings.Contains(err.Error(), "ipam") {
			t.Errorf("error of %d bytes: %.200v", len(fmt.Sprint(err)), err)
		}
	}
}

func confWith(t *testing.T, annotations, args string) *Config {
	t.Helper()
	c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"stickyip","ranges":[[{"subnet":"10.2.0.0/24"}],[{"subnet":"fd00::/120"}]]},
		"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{`+annotations+`}}}`), args)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The identity annotation names the identity within the pod's own
// namespace, apart from pod names (a pod author's
// stickyip.io/identity: db-0 is not the StatefulSet pod db-0); a restored
// static copy keeps its parent's annotation, so it maps to the same
// identity.
func TestIdentityAnnotation(t *testing.T) {
	const apiPod = "K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-7d9f8-x2x4q"
	for _, tc := range []struct {
		name, ann, args string
		want            Who
	}{
		{"deployment pod", `"stickyip.io/identity":"web"`, apiPod, Who{"prod", "identity:web", "web-7d9f8-x2x4q", false}},
		{"no annotation", ``, apiPod, Who{"prod", "web-7d9f8-x2x4q", "web-7d9f8-x2x4q", false}},
		{"a pod named db-0", ``, "K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0", Who{"prod", "db-0", "db-0", false}},
		{"another pod's identity db-0", `"stickyip.io/identity":"db-0"`, "K8S_POD_NAMESPACE=prod;K8S_POD_NAME=mimic",
			Who{"prod", "identity:db-0", "mimic", false}},
		{"restored copy of it", `"stickyip.io/identity":"web","stickyip.io/checkpoint-of":"prod/web-7d9f8-x2x4q","kubernetes.io/config.source":"file"`,
			"K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-7d9f8-x2x4q-node1", Who{"prod", "identity:web", "web-7d9f8-x2x4q", true}},
		{"no pod arguments", `"stickyip.io/identity":"web"`, "", Who{}},
	} {
		w, err := confWith(t, tc.ann, tc.args).Identity()
		if err != nil || w != tc.want {
			t.Errorf("%s: %+v %v; want %+v", tc.name, w, err, tc.want)
		}
	}
	for _, args := range []string{apiPod, ""} {
		for _, key := range []string{"other-ns/web", "/", ""} {
			_, err := confWith(t, `"stickyip.io/identity":"`+key+`"`, args).Identity()
			if !errors.Is(err, contract.ErrInvalidAnnotation) || !strings.Contains(err.Error(), "stickyip.io/identity") {
				// Found by FuzzPluginInput: without pod arguments a bad key was ignored.
				t.Errorf("key %q, args %q: err %v, want ErrInvalidAnnotation naming the annotation", key, args, err)
			}
		}
	}
}

func TestAnnotatedIPs(t *testing.T) {
	ips, err := confWith(t, `"stickyip.io/ips":"10.2.0.9, fd00::9"`, "").AnnotatedIPs()
	if err != nil || len(ips) != 2 || ips[0].String() != "10.2.0.9" || ips[1].String() != "fd00::9" {
		t.Fatalf("AnnotatedIPs = %v, %v", ips, err)
	}
	if ips, err := confWith(t, ``, "").AnnotatedIPs(); ips != nil || err != nil {
		t.Fatalf("no annotation: %v, %v", ips, err)
	}
	_, err = confWith(t, `"stickyip.io/ips":"10.9.0.1"`, "").AnnotatedIPs()
	if !errors.Is(err, contract.ErrInvalidAnnotation) || !strings.Contains(err.Error(), "stickyip.io/ips") || !strings.Contains(err.Error(), "10.9.0.1") {
		t.Fatalf("outside the ranges: err %v, want ErrInvalidAnnotation naming the annotation and the address", err)
	}
}

func TestReuseDelayConfig(t *testing.T) {
	c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24"}}`), "")
	if err != nil || c.Reservation.ReuseDelay != DefaultReuseDelay {
		t.Fatalf("default reuseDelay %v, %v", c.Reservation.ReuseDelay, err)
	}
	c, err = LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24","reservation":{"reuseDelay":"0s"}}}`), "")
	if err != nil || c.Reservation.ReuseDelay != 0 {
		t.Fatalf("reuseDelay 0s: %v, %v", c.Reservation.ReuseDelay, err)
	}
	_, err = LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24","reservation":{"reuseDelay":"soon"}}}`), "")
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ipam.reservation.reuseDelay") {
		t.Fatalf("bad reuseDelay: %v", err)
	}
}

func TestPerNamespaceConfig(t *testing.T) {
	load := func(ipam string) *Config {
		t.Helper()
		c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24"`+ipam+`},
			"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{"stickyip.io/ips":"10.2.0.9"}}}`), "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=p")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	def := load(``)
	if def.Reservation.MaxPerNamespace != contract.DefaultMaxPerNamespace || def.IPsAnnotation.Namespaces != nil {
		t.Fatalf("defaults: maxPerNamespace %d, ipsAnnotation %+v", def.Reservation.MaxPerNamespace, def.IPsAnnotation)
	}
	if e := NewEngine(load(`,"reservation":{"maxPerNamespace":0}`), Env{}); e.maxPerNamespace != 0 {
		t.Fatalf("maxPerNamespace 0 (no bound) not passed to the engine: %d", e.maxPerNamespace)
	}
	if e := NewEngine(load(`,"reservation":{"maxPerNamespace":5}`), Env{}); e.maxPerNamespace != 5 {
		t.Fatalf("maxPerNamespace 5 not passed to the engine: %d", e.maxPerNamespace)
	}
	for _, tc := range []struct {
		ipam string
		ok   bool
	}{
		{``, true}, // every namespace, as host-local
		{`,"ipsAnnotation":null`, true},
		{`,"ipsAnnotation":{}`, true},
		{`,"ipsAnnotation":{"namespaces":["infra","team-a"]}`, true},
		{`,"ipsAnnotation":{"namespaces":["infra"]}`, false},
		{`,"ipsAnnotation":{"namespaces":[]}`, false}, // nobody
	} {
		ips, err := load(tc.ipam).AnnotatedIPs()
		switch {
		case tc.ok && (err != nil || len(ips) != 1):
			t.Errorf("%s: %v, %v; want 10.2.0.9", tc.ipam, ips, err)
		case !tc.ok && (!errors.Is(err, contract.ErrInvalidAnnotation) || !strings.Contains(err.Error(), "team-a") ||
			!strings.Contains(err.Error(), "ipam.ipsAnnotation.namespaces")):
			t.Errorf("%s: err %v; want ErrInvalidAnnotation naming the namespace and the key", tc.ipam, err)
		}
	}
}

// TestWaitDefaultsAndLimits: the defaults the documentation promises
// (reservation.reuseDelay 30 s, holderWait 10 s), and holderWait accepted
// up to a minute, refused beyond it naming the key.
func TestWaitDefaultsAndLimits(t *testing.T) {
	load := func(ipam string) (*Config, error) {
		return LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"subnet":"10.2.0.0/24"`+ipam+`}}`), "")
	}
	c, err := load("")
	if err != nil || c.Reservation.ReuseDelay != 30*time.Second || c.HolderWait != 10*time.Second {
		t.Fatalf("defaults: reuseDelay %v, holderWait %v (%v); want 30s and 10s", c.Reservation.ReuseDelay, c.HolderWait, err)
	}
	if c, err := load(`,"holderWait":"1m"`); err != nil || c.HolderWait != time.Minute {
		t.Fatalf("holderWait 1m: %v (%v)", c.HolderWait, err)
	}
	if _, err := load(`,"holderWait":"61s"`); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ipam.holderWait 1m1s is more than 1m0s") {
		t.Fatalf("holderWait 61s: %v, want a config error naming ipam.holderWait and the limit", err)
	}
}
