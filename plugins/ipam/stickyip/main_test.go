package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// call runs the plugin in-process through skel, exactly as main does, with
// the CNI environment set and stdin/stdout redirected to files.
func call(t *testing.T, cmd, cid, args string, conf []byte) ([]byte, *types.Error) {
	t.Helper()
	for k, v := range map[string]string{
		// CNI_NETNS names a live namespace: the sandboxes of this test never die.
		"CNI_COMMAND": cmd, "CNI_CONTAINERID": cid, "CNI_NETNS": "/proc/self/ns/net", "CNI_IFNAME": "eth0",
		"CNI_PATH": "/opt/cni/bin", "CNI_ARGS": args, "CNI_NETNS_OVERRIDE": "1",
	} {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "stdin"), filepath.Join(dir, "stdout")
	if err := os.WriteFile(in, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	stdin, _ := os.Open(in)
	stdout, _ := os.Create(out)
	oldIn, oldOut := os.Stdin, os.Stdout
	os.Stdin, os.Stdout = stdin, stdout
	e := skel.PluginMainFuncsWithError(cniFuncs, supportedVersions, about)
	os.Stdin, os.Stdout = oldIn, oldOut
	stdin.Close()
	stdout.Close()
	b, _ := os.ReadFile(out)
	return b, e
}

type netConf struct {
	ver, dataDir string
	ann          map[string]string
	prev         any
	valid        []types.GCAttachment
}

func (n netConf) bytes() []byte {
	m := map[string]any{
		"cniVersion": n.ver, "name": "testnet", "type": "bridge",
		"ipam": map[string]any{"type": "stickyip", "dataDir": n.dataDir, "hostLocalDataDir": "",
			"ranges": []any{[]any{map[string]string{"subnet": "10.77.0.0/29"}}, []any{map[string]string{"subnet": "fd77::/125"}}}},
	}
	if n.ann != nil {
		m["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": n.ann}
	}
	if n.prev != nil {
		m["prevResult"] = n.prev
	}
	if n.valid != nil {
		m["cni.dev/valid-attachments"] = n.valid
	}
	b, _ := json.Marshal(m)
	return b
}

func podArgs(name, uid string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=%s;K8S_POD_UID=%s", name, uid)
}

func ipsOfResult(t *testing.T, ver string, out []byte) []string {
	t.Helper()
	r, err := version.NewResult(ver, out)
	if err != nil {
		t.Fatalf("result %s does not parse as %s: %v", out, ver, err)
	}
	cur, err := current.NewResultFromResult(r)
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range cur.IPs {
		ips = append(ips, ip.Address.String())
	}
	return ips
}

func states(t *testing.T, dataDir string) map[string]reservation.State {
	out := map[string]reservation.State{}
	err := boltstore.New(dataDir, 0).View("testnet", func(tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error { out[r.IP.String()] = r.State; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestVerbsForEverySpecVersion(t *testing.T) {
	for _, ver := range version.All.SupportedVersions() {
		t.Run(ver, func(t *testing.T) {
			dir := t.TempDir()
			keep := netConf{ver: ver, dataDir: dir, ann: map[string]string{"io.kubernetes.cri/reserved-ip-duration": "5"}}

			out, e := call(t, "ADD", "c1", podArgs("web", "u1"), keep.bytes())
			if e != nil {
				t.Fatalf("ADD: %v", e)
			}
			first := ipsOfResult(t, ver, out)
			if len(first) != 2 || first[0] != "10.77.0.2/29" || first[1] != "fd77::2/125" {
				t.Fatalf("ADD got %v", first)
			}

			if cmp, _ := version.GreaterThanOrEqualTo(ver, "0.4.0"); cmp { // CHECK exists from 0.4.0
				prev := json.RawMessage(out)
				withPrev := keep
				withPrev.prev = prev
				if _, e := call(t, "CHECK", "c1", podArgs("web", "u1"), withPrev.bytes()); e != nil {
					t.Fatalf("CHECK of a good allocation: %v", e)
				}
				if _, e := call(t, "CHECK", "other", podArgs("web", "u1"), withPrev.bytes()); e == nil || e.Code != types.ErrUnknownContainer {
					t.Fatalf("CHECK of an unknown container: %v, want code 3", e)
				}
			}

			if _, e := call(t, "DEL", "c1", podArgs("web", "u1"), keep.bytes()); e != nil {
				t.Fatalf("DEL: %v", e)
			}
			if _, e := call(t, "DEL", "c1", podArgs("web", "u1"), keep.bytes()); e != nil {
				t.Fatalf("second DEL (must be idempotent): %v", e)
			}
			if st := states(t, dir); st["10.77.0.2"] != reservation.Reserved || st["fd77::2"] != reservation.Reserved {
				t.Fatalf("after DEL: %v", st)
			}

			plain := netConf{ver: ver, dataDir: dir}
			out, e = call(t, "ADD", "c2", podArgs("db", "u2"), plain.bytes())
			if e != nil || ipsOfResult(t, ver, out)[0] == "10.77.0.2/29" {
				t.Fatalf("another pod got web's reserved IP or failed: %s %v", out, e)
			}
			out, e = call(t, "ADD", "c3", podArgs("web", "u3"), keep.bytes())
			if e != nil {
				t.Fatalf("re-ADD: %v", e)
			}
			if again := ipsOfResult(t, ver, out); strings.Join(again, ",") != strings.Join(first, ",") {
				t.Fatalf("re-created pod got %v, want %v", again, first)
			}

			gcConf := netConf{ver: ver, dataDir: dir, valid: []types.GCAttachment{{ContainerID: "c3", IfName: "eth0"}}}
			status := netConf{ver: ver, dataDir: dir}
			_, gcErr := call(t, "GC", "", "", gcConf.bytes())
			_, stErr := call(t, "STATUS", "", "", status.bytes())
			if ver != "1.1.0" {
				if gcErr == nil || stErr == nil {
					t.Fatalf("GC/STATUS accepted for cniVersion %s", ver)
				}
				return
			}
			if gcErr != nil || stErr != nil {
				t.Fatalf("GC: %v, STATUS: %v", gcErr, stErr)
			}
			// db's addresses are freed and cool down (reservation.reuseDelay's
			// default); web's stay allocated.
			st := states(t, dir)
			cooling := 0
			for _, state := range st {
				if state == "cooling" {
					cooling++
				}
			}
			if len(st) != 4 || cooling != 2 {
				t.Fatalf("GC should have freed db's addresses (cooling down) and kept web's: %v", st)
			}
			// Fill the pool: ADD fails with 100, but STATUS stays healthy (issue
			// 10: a failing STATUS takes the whole node NotReady on containerd 2.x).
			full := false
			for i := 4; i < 10; i++ {
				_, e := call(t, "ADD", fmt.Sprintf("f%d", i), podArgs(fmt.Sprintf("f%d", i), "x"), plain.bytes())
				full = full || (e != nil && e.Code == 100)
			}
			if !full {
				t.Fatal("the pool never filled up")
			}
			if _, e := call(t, "STATUS", "", "", status.bytes()); e != nil {
				t.Fatalf("STATUS on a full pool: %v, want success", e)
			}
			// A damaged store is what STATUS exists to report: code 50, naming the file.
			db := filepath.Join(dir, "stickyip.db")
			if err := os.WriteFile(db, bytes.Repeat([]byte{0x5a}, 8192), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, e := call(t, "STATUS", "", "", status.bytes()); e == nil || e.Code != 50 || !strings.Contains(e.Msg, db) {
				t.Fatalf("STATUS on a damaged store: %v, want code 50 naming %s", e, db)
			}
		})
	}
}

func TestErrorsAreCNIErrorObjects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, args string
		conf       []byte
		code       uint
		msg        string
	}{
		{"bad annotation", podArgs("web", "u"), netConf{ver: "1.0.0", dataDir: dir, ann: map[string]string{"io.kubernetes.cri/reserved-ip-duration": "soon"}}.bytes(), types.ErrInvalidNetworkConfig, `reserved-ip-duration="soon"`},
		{"malformed config", podArgs("web", "u"), []byte(`{"cniVersion":"1.0.0","name":"x","ipam":`), types.ErrDecodingFailure, ""},
		{"unknown CNI_ARGS key", "FOO=bar", netConf{ver: "1.0.0", dataDir: dir}.bytes(), types.ErrInvalidEnvironmentVariables, "FOO"},
		{"unsupported version", podArgs("web", "u"), netConf{ver: "0.0.9", dataDir: dir}.bytes(), types.ErrIncompatibleCNIVersion, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := call(t, "ADD", "c-"+strings.ReplaceAll(tc.name, " ", "-"), tc.args, tc.conf)
			if e == nil || e.Code != tc.code || !strings.Contains(e.Msg, tc.msg) {
				t.Fatalf("got %v (stdout %q), want code %d mentioning %q", e, out, tc.code, tc.msg)
			}
			if len(out) != 0 {
				t.Fatalf("stdout carried %q besides the error", out)
			}
		})
	}
}

// with returns conf with extra top-level keys (runtimeConfig entries merge).
func with(t *testing.T, conf []byte, extra map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(conf, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		if rc, ok := v.(map[string]any); ok && k == "runtimeConfig" && m[k] != nil {
			for rk, rv := range rc {
				m[k].(map[string]any)[rk] = rv
			}
			continue
		}
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// Every source of a requested address meets the same rules at the plugin
// edge: the gateway (IPv4 and IPv6), network or broadcast address, or two
// addresses in one range set are error 7; a stranger asking for a cooling
// address is error 101; ipam.ipsAnnotation.namespaces limits the annotation.
func TestRequestedAddressRules(t *testing.T) {
	dir := t.TempDir()
	plain := netConf{ver: "1.0.0", dataDir: dir}.bytes()
	ann := func(ips string) []byte {
		return netConf{ver: "1.0.0", dataDir: dir, ann: map[string]string{"stickyip.io/ips": ips}}.bytes()
	}
	for _, tc := range []struct {
		name, args string
		conf       []byte
		code       uint
		msg        string
	}{
		{"annotation gateway", podArgs("a", "u"), ann("10.77.0.1"), types.ErrInvalidNetworkConfig, "10.77.0.1 is the gateway of subnet 10.77.0.0/29"},
		{"annotation IPv6 gateway", podArgs("a", "u"), ann("fd77::1"), types.ErrInvalidNetworkConfig, "fd77::1 is the gateway of subnet fd77::/125"},
		{"CNI_ARGS IP gateway", podArgs("a", "u") + ";IP=10.77.0.1", plain, types.ErrInvalidNetworkConfig, "gateway"},
		{"ips capability broadcast", podArgs("a", "u"), with(t, plain, map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.77.0.7/29"}}}),
			types.ErrInvalidNetworkConfig, "10.77.0.7 is the broadcast address"},
		{"args.cni.ips network address", podArgs("a", "u"), with(t, plain, map[string]any{"args": map[string]any{"cni": map[string]any{"ips": []string{"10.77.0.0"}}}}),
			types.ErrInvalidNetworkConfig, "10.77.0.0 is the network address"},
		{"two in one range set", podArgs("a", "u") + ";IP=10.77.0.3", ann("10.77.0.4"), types.ErrInvalidNetworkConfig, "same range set"},
		{"annotation from a namespace not listed", podArgs("a", "u"),
			with(t, ann("10.77.0.4"), map[string]any{"ipam": map[string]any{"type": "stickyip", "dataDir": dir, "hostLocalDataDir": "", "subnet": "10.77.0.0/29",
				"ipsAnnotation": map[string]any{"namespaces": []string{"infra"}}}}),
			types.ErrInvalidNetworkConfig, `namespace "default" may not choose`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, e := call(t, "ADD", "c-"+strings.ReplaceAll(tc.name, " ", "-"), tc.args, tc.conf)
			if e == nil || e.Code != tc.code || !strings.Contains(e.Msg, tc.msg) {
				t.Fatalf("got %v (stdout %q), want code %d mentioning %q", e, out, tc.code, tc.msg)
			}
		})
	}
	if st := states(t, dir); len(st) != 0 {
		t.Fatalf("refused ADDs left records: %v", st)
	}

	// default/a's addresses cool after its DEL (reuseDelay's default, 30s):
	// default/b may not ask for them, default/a may.
	out, e := call(t, "ADD", "ca", podArgs("a", "ua"), plain)
	if e != nil {
		t.Fatal(e)
	}
	v4 := strings.TrimSuffix(ipsOfResult(t, "1.0.0", out)[0], "/29")
	if _, e := call(t, "DEL", "ca", podArgs("a", "ua"), plain); e != nil {
		t.Fatal(e)
	}
	if _, e := call(t, "ADD", "cb", podArgs("b", "ub")+";IP="+v4, plain); e == nil || e.Code != 101 || !strings.Contains(e.Msg, "cooling down") || !strings.Contains(e.Msg, "default/a") {
		t.Fatalf("a stranger asking for default/a's cooling %s: %v, want 101 naming the delay and default/a", v4, e)
	}
	out, e = call(t, "ADD", "ca2", podArgs("a", "ua2")+";IP="+v4, plain)
	if e != nil || ipsOfResult(t, "1.0.0", out)[0] != v4+"/29" {
		t.Fatalf("default/a asking for its own cooling %s: %s %v", v4, out, e)
	}
}

// A store file deleted under a node that had one: ADD, DEL and GC fail
// with error 102 and STATUS with 50 (the node goes NotReady), and no call
// starts over from an empty store, which would hand out the addresses its
// running pods hold. A data directory that never had a store is not that
// case: its first ADD creates one.
func TestLostStoreServesNoCall(t *testing.T) {
	dir := t.TempDir()
	conf := netConf{ver: "1.1.0", dataDir: dir}.bytes()
	if _, e := call(t, "ADD", "c1", podArgs("a", "u1"), conf); e != nil {
		t.Fatalf("first ADD on a new data directory: %v", e)
	}
	if err := os.Remove(filepath.Join(dir, boltstore.DBFile)); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"ADD", "DEL", "GC"} {
		if _, e := call(t, verb, "c2", podArgs("b", "u2"), conf); e == nil || e.Code != 102 || !strings.Contains(e.Msg, "this node had a store") {
			t.Fatalf("%s on a lost store: %+v, want code 102 saying the store was lost", verb, e)
		}
	}
	if _, e := call(t, "STATUS", "", "", conf); e == nil || e.Code != 50 || !strings.Contains(e.Details, "checkpointd rebuilds") {
		t.Fatalf("STATUS on a lost store: %+v, want code 50 naming the rebuild", e)
	}
	if _, err := os.Stat(filepath.Join(dir, boltstore.DBFile)); !os.IsNotExist(err) {
		t.Fatalf("a call created a new store in place of the lost one: %v", err)
	}
}

// ipam.newStoreWait: on a node without a store, the first ADD
// does not create one but starts the wait and fails with error 11 saying
// why and until when, as does every ADD until checkpointd has looked; DEL
// and GC of a sandbox on such a node succeed (nothing was ever recorded);
// STATUS stays good (the node stays Ready). Once checkpointd has looked
// (the wait ended), the next ADD creates the store.
func TestNewStoreWait(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stickyip")
	conf := with(t, netConf{ver: "1.1.0", dataDir: dir}.bytes(), map[string]any{"ipam": map[string]any{"type": "stickyip", "dataDir": dir,
		"hostLocalDataDir": "", "subnet": "10.77.0.0/29", "newStoreWait": "1h"}})
	for range 2 {
		_, e := call(t, "ADD", "c1", podArgs("a", "u1"), conf)
		if e == nil || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "checkpointd has not yet read this node's placement entries") ||
			!strings.Contains(e.Details, "ipam.newStoreWait to 0s") {
			t.Fatalf("ADD on a node without a store: %+v, want error 11 saying it waits for checkpointd", e)
		}
	}
	for _, verb := range []string{"DEL", "GC", "STATUS"} {
		if _, e := call(t, verb, "c1", podArgs("a", "u1"), conf); e != nil {
			t.Fatalf("%s while the new store waits: %v", verb, e)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, boltstore.DBFile)); !os.IsNotExist(err) {
		t.Fatalf("a store was created while it waits: %v", err)
	}
	s := boltstore.New(dir, 0)
	w, ok := s.NewStoreWait()
	if !ok {
		t.Fatal("no wait recorded")
	}
	w.Until = w.Since // checkpointd looked
	if _, err := s.HoldNew(w); err != nil {
		t.Fatal(err)
	}
	out, e := call(t, "ADD", "c1", podArgs("a", "u1"), conf)
	if e != nil || ipsOfResult(t, "1.1.0", out)[0] != "10.77.0.2/29" {
		t.Fatalf("ADD once checkpointd has looked: %s %v", out, e)
	}
	if _, e := call(t, "ADD", "c2", podArgs("b", "u2"), with(t, conf, map[string]any{"ipam": map[string]any{"type": "stickyip", "dataDir": dir,
		"subnet": "10.77.0.0/29", "newStoreWait": "-1s"}})); e == nil || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "ipam.newStoreWait") {
		t.Fatalf("a negative ipam.newStoreWait: %+v, want error 7 naming it", e)
	}
}
