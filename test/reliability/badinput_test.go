//go:build reliability

package reliability

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// badCase is one row of the bad-input table: a call built from a valid base
// by one change, and the CNI error it must produce.
type badCase struct {
	name        string
	command     string                    // default ADD
	mutate      func(conf map[string]any) // applied to a valid config
	stdin       *string                   // raw stdin instead of the config
	annotations map[string]string         // pod annotations (runtimeConfig)
	args        *string                   // CNI_ARGS instead of a valid pod's
	containerID string                    // CNI_CONTAINERID instead of the default
	ifname      string                    // CNI_IFNAME instead of eth0
	unset       []string                  // environment variables to remove

	code    uint     // expected CNI error code; 0 = the call must succeed
	mention []string // each must appear (case-insensitive) in msg or details
}

func setRanges(conf map[string]any, sets ...[]map[string]any) {
	var rs []any
	for _, s := range sets {
		rs = append(rs, s)
	}
	ipamOf(conf)["ranges"] = rs
}

func rng(subnet string, kv ...string) map[string]any {
	m := map[string]any{"subnet": subnet}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func strp(s string) *string { return &s }

// TestBadInput runs every malformed or hostile input through the real plugin
// and asserts the exact CNI error code and a message naming the problem. A
// failed ADD must also leave nothing behind in the store.
func TestBadInput(t *testing.T) {
	p := newPlugin(t)
	longValue := strings.Repeat("7", 100000)
	cases := []badCase{
		// Network configuration.
		{name: "malformed JSON", stdin: strp(`{"cniVersion":"1.1.0","name":"badnet","ipam":{"type":"stickyip",`), code: 6, mention: []string{"network config"}},
		{name: "empty stdin", stdin: strp(""), code: 6, mention: []string{"network config"}},
		{name: "JSON array instead of object", stdin: strp(`[1,2,3]`), code: 6, mention: []string{"network config"}},
		{name: "missing network name", mutate: func(c map[string]any) { delete(c, "name") }, code: 7, mention: []string{"name"}},
		{name: "network name with slash", mutate: func(c map[string]any) { c["name"] = "a/b" }, code: 7, mention: []string{"name"}},
		{name: "over-long network name", mutate: func(c map[string]any) { c["name"] = strings.Repeat("n", 40000) }, code: 7, mention: []string{"name", "253"}},
		{name: "missing ipam block", mutate: func(c map[string]any) { delete(c, "ipam") }, code: 7, mention: []string{"ipam"}},
		{name: "missing ranges", mutate: func(c map[string]any) { delete(ipamOf(c), "ranges") }, code: 7, mention: []string{"range"}},
		{name: "ranges not a list", mutate: func(c map[string]any) { ipamOf(c)["ranges"] = "10.250.0.0/24" }, code: 7, mention: []string{"ranges"}},
		{name: "unknown key in reservation block", mutate: func(c map[string]any) {
			ipamOf(c)["reservation"] = map[string]any{"maxDuraton": "1h"}
		}, code: 7, mention: []string{"reservation", "maxDuraton"}},
		{name: "bad reservation.poolFull", mutate: func(c map[string]any) {
			ipamOf(c)["reservation"] = map[string]any{"poolFull": "sometimes"}
		}, code: 7, mention: []string{"poolFull", "sometimes"}},
		{name: "bad reservation.maxDuration", mutate: func(c map[string]any) {
			ipamOf(c)["reservation"] = map[string]any{"maxDuration": "forever"}
		}, code: 7, mention: []string{"maxDuration", "forever"}},
		{name: "negative reservation.maxDuration", mutate: func(c map[string]any) {
			ipamOf(c)["reservation"] = map[string]any{"maxDuration": "-1h"}
		}, code: 7, mention: []string{"maxDuration", "-1h"}},
		{name: "bad lockTimeout", mutate: func(c map[string]any) { ipamOf(c)["lockTimeout"] = "soon" }, code: 7, mention: []string{"lockTimeout", "soon"}},
		{name: "overlapping range sets", mutate: func(c map[string]any) {
			setRanges(c, []map[string]any{rng("10.250.0.0/24")}, []map[string]any{rng("10.250.0.128/25")})
		}, code: 7, mention: []string{"overlap"}},
		{name: "overlapping ranges in one set", mutate: func(c map[string]any) {
			setRanges(c, []map[string]any{rng("10.250.0.0/24"), rng("10.250.0.0/25")})
		}, code: 7, mention: []string{"overlap"}},
		{name: "/32 subnet", mutate: func(c map[string]any) { setRanges(c, []map[string]any{rng("10.250.0.7/32")}) }, code: 7, mention: []string{"10.250.0.7/32", "too small"}},
		{name: "/31 subnet", mutate: func(c map[string]any) { setRanges(c, []map[string]any{rng("10.250.0.6/31")}) }, code: 7, mention: []string{"10.250.0.6/31"}},
		{name: "subnet with host bits", mutate: func(c map[string]any) { setRanges(c, []map[string]any{rng("10.250.0.5/24")}) }, code: 7, mention: []string{"10.250.0.0"}},
		{name: "subnet not a CIDR", mutate: func(c map[string]any) { setRanges(c, []map[string]any{rng("10.250.0/24")}) }, code: 7, mention: []string{"10.250.0/24"}},
		{name: "gateway not an IP", mutate: func(c map[string]any) { setRanges(c, []map[string]any{rng("10.250.0.0/24", "gateway", "banana")}) }, code: 7, mention: []string{"banana"}},
		{name: "rangeStart outside subnet", mutate: func(c map[string]any) {
			setRanges(c, []map[string]any{rng("10.250.0.0/24", "rangeStart", "10.251.0.10")})
		}, code: 7, mention: []string{"10.251.0.10"}},
		{name: "mixed families in one range set", mutate: func(c map[string]any) {
			setRanges(c, []map[string]any{rng("10.250.0.0/24"), rng("fd00:250::/120")})
		}, code: 7, mention: []string{"famil"}},
		{name: "unsupported cniVersion", mutate: func(c map[string]any) { c["cniVersion"] = "9.9.9" }, code: 1, mention: []string{"9.9.9"}},
		{name: "GC with a cniVersion before 1.1.0", command: "GC", mutate: func(c map[string]any) { c["cniVersion"] = "1.0.0" }, code: 1, mention: []string{"GC"}},
		// Keys other plugins put in the same config are accepted, as host-local does.
		{name: "unknown top-level and ipam keys (bridge, flannel) accepted", mutate: func(c map[string]any) {
			c["bridge"] = "cni0"
			c["isGateway"] = true
			ipamOf(c)["someFutureKey"] = 1
		}, code: 0},

		// Pod annotations.
		{name: "annotation negative", annotations: map[string]string{annoDuration: "-5"}, code: 7, mention: []string{annoDuration, "-5"}},
		{name: "annotation non-numeric", annotations: map[string]string{annoDuration: "abc"}, code: 7, mention: []string{annoDuration, "abc"}},
		{name: "annotation too many minutes", annotations: map[string]string{annoDuration: "99999999999999999999"}, code: 7, mention: []string{annoDuration, "99999999999999999999"}},
		{name: "annotation 1e309", annotations: map[string]string{annoDuration: "1e309"}, code: 7, mention: []string{annoDuration, "1e309"}},
		{name: "annotation empty", annotations: map[string]string{annoDuration: ""}, code: 7, mention: []string{annoDuration, "empty"}},
		{name: "annotation very long", annotations: map[string]string{annoDuration: longValue}, code: 7, mention: []string{annoDuration, "7777777777"}},
		{name: "annotation fractional minutes", annotations: map[string]string{annoDuration: "1.5"}, code: 7, mention: []string{annoDuration, "1.5"}},
		{name: "annotation negative Go duration", annotations: map[string]string{annoDuration: "-1h"}, code: 7, mention: []string{annoDuration, "-1h"}},
		{name: "annotation NaN", annotations: map[string]string{annoDuration: "NaN"}, code: 7, mention: []string{annoDuration, "NaN"}},
		{name: "checkpoint-of on a static pod, malformed", annotations: map[string]string{
			"stickyip.io/checkpoint-of": "no-slash", "kubernetes.io/config.source": "file"}, code: 7, mention: []string{"stickyip.io/checkpoint-of", "no-slash"}},

		// CNI environment.
		{name: "CNI_ARGS not KEY=VALUE", args: strp("K8S_POD_NAMESPACE=default;K8S_POD_NAME"), code: 4, mention: []string{"CNI_ARGS", "K8S_POD_NAME"}},
		{name: "CNI_ARGS unknown key without IgnoreUnknown", args: strp("K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;FOO=bar"), code: 4, mention: []string{"FOO", "IgnoreUnknown"}},
		{name: "over-long pod name", args: strp(podArgs("default", strings.Repeat("p", 300), "uid-1", "c1")), code: 4, mention: []string{"K8S_POD_NAME", "253"}},
		{name: "over-long namespace", args: strp(podArgs(strings.Repeat("n", 64), "web", "uid-1", "c1")), code: 4, mention: []string{"K8S_POD_NAMESPACE", "63"}},
		{name: "over-long CNI_ARGS", args: strp(podArgs("default", "web", strings.Repeat("u", 9000), "c1")), code: 4, mention: []string{"CNI_ARGS"}},
		{name: "pod name with slash", args: strp(podArgs("default", "a/b", "uid-1", "c1")), code: 4, mention: []string{"K8S_POD_NAME"}},
		{name: "requested IP not an IP", args: strp(podArgs("default", "web", "uid-1", "c1") + ";IP=10.250.0.300"), code: 4, mention: []string{"IP", "10.250.0.300"}},
		{name: "over-long container ID", containerID: strings.Repeat("c", 70000), code: 4, mention: []string{"container"}},
		{name: "container ID with bad characters", containerID: "bad/id", code: 4, mention: []string{"containerID"}},
		{name: "missing CNI_CONTAINERID", unset: []string{"CNI_CONTAINERID"}, code: 4, mention: []string{"CNI_CONTAINERID"}},
		{name: "missing CNI_IFNAME", unset: []string{"CNI_IFNAME"}, code: 4, mention: []string{"CNI_IFNAME"}},
		{name: "over-long interface name", ifname: "eth0123456789abcdef", code: 4, mention: []string{"interface name"}},
		{name: "unknown CNI_COMMAND", command: "FROBNICATE", code: 4, mention: []string{"FROBNICATE"}},
		{name: "lower-case CNI_COMMAND", command: "add", code: 4, mention: []string{"add"}},
		// Without pod identity the plugin works like host-local (no reservation).
		{name: "missing CNI_ARGS (plain CNI call) accepted", args: strp(""), code: 0},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dataDir := filepath.Join(base, "data")
			conf := netConf("badnet", dataDir, filepath.Join(base, "plugin.log"))
			if tc.mutate != nil {
				tc.mutate(conf)
			}
			annotations := tc.annotations
			if annotations == nil {
				annotations = map[string]string{}
			}
			stdin := encodeConf(t, withAnnotations(conf, annotations))
			if tc.stdin != nil {
				stdin = []byte(*tc.stdin)
			}
			c := cniCall{Command: "ADD", ContainerID: "c1", Netns: goneNetns(t), IfName: "eth0",
				Args: podArgs("default", "web", "uid-1", "c1"), Stdin: stdin, Unset: tc.unset}
			if tc.command != "" {
				c.Command = tc.command
			}
			if tc.args != nil {
				c.Args = *tc.args
			}
			if tc.containerID != "" {
				c.ContainerID = tc.containerID
			}
			if tc.ifname != "" {
				c.IfName = tc.ifname
			}
			o := p.CNI(c)
			if o.Panicked() {
				t.Fatalf("plugin panicked: %s", o.Describe())
			}
			if o.StdoutBad != "" {
				t.Fatalf("%s: %s", o.StdoutBad, o.Describe())
			}
			if tc.code == 0 {
				if !o.OK() {
					t.Fatalf("want success, got %v: %s", o.Err, o.Describe())
				}
				return
			}
			if o.Err == nil {
				t.Fatalf("want CNI error %d, got success: %s", tc.code, o.Describe())
			}
			t.Logf("%s", clip([]byte(o.Err.String()), 300))
			if o.Err.Code != tc.code {
				t.Errorf("want code %d, got %s", tc.code, o.Err)
			}
			text := strings.ToLower(o.Err.Text())
			for _, m := range tc.mention {
				if !strings.Contains(text, strings.ToLower(m)) {
					t.Errorf("message does not mention %q: %s", m, o.Err)
				}
			}
			if n := len(o.Err.Msg) + len(o.Err.Details); n > 2048 {
				t.Errorf("message is %d bytes; an operator cannot read that: %s", n, clip([]byte(o.Err.Text()), 300))
			}
			if o.ExitCode == 0 {
				t.Errorf("exit code 0 with an error object")
			}
			// A refused ADD leaves nothing behind.
			if statFile(t, filepath.Join(dataDir, dbName)).Exists {
				if es := p.List(t, dataDir); len(es) != 0 {
					t.Errorf("refused call left entries in the store: %v", es)
				}
			}
		})
	}
}

// TestInputEdges covers inputs that are valid but at the edges: a huge but
// representable duration is clamped (and shown as clamped), a requested IP
// held by another pod is refused with code 101 naming the holder, and a
// repeated DEL succeeds.
func TestInputEdges(t *testing.T) {
	p := newPlugin(t)
	base := t.TempDir()
	dataDir := filepath.Join(base, "data")
	conf := netConf("edgenet", dataDir, filepath.Join(base, "plugin.log"))
	netns := goneNetns(t)
	add := func(name, container, extraArgs string, annotations map[string]string) *outcome {
		return p.CNI(cniCall{Command: "ADD", ContainerID: container, Netns: netns, IfName: "eth0",
			Args: podArgs("default", name, "uid-"+name, container) + extraArgs, Stdin: encodeConf(t, withAnnotations(conf, annotations))})
	}

	t.Run("huge duration is clamped", func(t *testing.T) {
		o := add("clamped", "c-clamped", "", map[string]string{annoDuration: "1000000"})
		if !o.OK() {
			t.Fatalf("ADD: %s", o.Describe())
		}
		var found bool
		for _, e := range p.List(t, dataDir) {
			if e.Name != "clamped" {
				continue
			}
			found = true
			if !e.Clamped || e.Duration != "168h0m0s" {
				t.Errorf("want clamped to 168h0m0s (default maxDuration), got duration=%q requested=%q clamped=%v", e.Duration, e.RequestedDuration, e.Clamped)
			}
		}
		if !found {
			t.Fatalf("ADD succeeded but list has no entry for default/clamped")
		}
	})

	t.Run("requested IP held by another pod", func(t *testing.T) {
		o := add("holder", "c-holder", "", nil)
		if !o.OK() || len(o.Result.Addrs()) != 1 {
			t.Fatalf("ADD holder: %s", o.Describe())
		}
		ip := o.Result.Addrs()[0]
		o = add("thief", "c-thief", ";IP="+ip, nil)
		if o.Err == nil || o.Err.Code != 101 {
			t.Fatalf("want code 101 for requested IP %s held by default/holder, got %v: %s", ip, o.Err, o.Describe())
		}
		if !strings.Contains(o.Err.Text(), ip) || !strings.Contains(o.Err.Text(), "holder") {
			t.Errorf("message should name %s and its holder default/holder: %s", ip, o.Err)
		}
	})

	t.Run("DEL twice and DEL of unknown container", func(t *testing.T) {
		for i, id := range []string{"c-holder", "c-holder", "never-added"} {
			o := p.CNI(cniCall{Command: "DEL", ContainerID: id, Netns: netns, IfName: "eth0",
				Args: podArgs("default", "holder", "uid-holder", id), Stdin: encodeConf(t, conf)})
			if !o.OK() {
				t.Fatalf("DEL #%d of %s: %s", i+1, id, o.Describe())
			}
		}
	})

	t.Run("pool exhausted: ADD 100, STATUS stays ok, recovers after DEL", func(t *testing.T) {
		// Live sandboxes: allocations whose netns is gone are reclaimed when the pool is full.
		live := newNetnsPool(t, 1).Path(0)
		small := netConf("smallnet", filepath.Join(base, "small"), filepath.Join(base, "plugin.log"), []string{"10.250.3.0/29"})
		call := func(command, name string) *outcome {
			c := "c-" + name
			return p.CNI(cniCall{Command: command, ContainerID: c, Netns: live, IfName: "eth0",
				Args: podArgs("default", name, "uid-"+name, c), Stdin: encodeConf(t, small)})
		}
		status := func() *outcome { return p.CNI(cniCall{Command: "STATUS", Stdin: encodeConf(t, small)}) }
		n := 0
		for ; n < 10; n++ {
			o := call("ADD", fmt.Sprintf("fill%d", n))
			if o.OK() {
				continue
			}
			if o.Err == nil || o.Err.Code != 100 {
				t.Fatalf("ADD #%d on a full /29: want code 100, got %s", n+1, o.Describe())
			}
			if !strings.Contains(o.Err.Text(), "10.250.3.") {
				t.Errorf("pool-exhausted message does not name the range: %s", o.Err)
			}
			break
		}
		if n != 5 {
			t.Fatalf("a /29 with a gateway handed out %d addresses, want 5", n)
		}
		// A failing STATUS makes containerd ≥ 2.0.1 report the
		// node's network not ready; a full pool is a per-pod condition.
		if o := status(); !o.OK() {
			t.Errorf("STATUS on a full pool: want success, got %s", o.Describe())
		}
		if o := call("DEL", "fill0"); !o.OK() {
			t.Fatalf("DEL: %s", o.Describe())
		}
		if o := status(); !o.OK() {
			t.Errorf("STATUS after a DEL: %s", o.Describe())
		}
		if o := call("ADD", "again"); !o.OK() {
			t.Errorf("ADD after a DEL: %s", o.Describe())
		}
	})

	t.Run("CHECK against prevResult", func(t *testing.T) {
		o := add("checked", "c-checked", "", nil)
		if !o.OK() {
			t.Fatalf("ADD: %s", o.Describe())
		}
		check := func(ip string) *outcome {
			c := withAnnotations(conf, nil)
			c["prevResult"] = map[string]any{"cniVersion": testCNIVersion, "ips": []map[string]any{{"address": ip + "/24"}}}
			return p.CNI(cniCall{Command: "CHECK", ContainerID: "c-checked", Netns: netns, IfName: "eth0",
				Args: podArgs("default", "checked", "uid-checked", "c-checked"), Stdin: encodeConf(t, c)})
		}
		if r := check(o.Result.Addrs()[0]); !r.OK() {
			t.Errorf("CHECK with the ADD's own result: %s", r.Describe())
		}
		if r := check("10.250.0.250"); r.Err == nil || r.Err.Code != 3 || !strings.Contains(r.Err.Text(), "10.250.0.250") {
			t.Errorf("CHECK with an address the container does not hold: want code 3 naming 10.250.0.250, got %s", r.Describe())
		}
	})

	t.Run("VERSION", func(t *testing.T) {
		o := p.CNI(cniCall{Command: "VERSION", Stdin: []byte(`{"cniVersion":"1.1.0"}`)})
		var v struct {
			Supported []string `json:"supportedVersions"`
		}
		if o.ExitCode != 0 || json.Unmarshal(o.Stdout, &v) != nil || !strings.Contains(fmt.Sprint(v.Supported), "1.1.0") {
			t.Fatalf("VERSION should list 1.1.0: %s", o.Describe())
		}
	})
}
