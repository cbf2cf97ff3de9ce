//go:build reliability

package reliability

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRunnerClassifies checks the process runner on stand-in scripts, so a
// suite cannot pass because the runner misreads what the plugin did.
func TestRunnerClassifies(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) *plugin {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return &plugin{Path: path}
	}
	add := cniCall{Command: "ADD", ContainerID: "c1", Netns: "/x", IfName: "eth0"}
	cases := []struct {
		name string
		p    *plugin
		call cniCall
		kind string
		code uint
	}{
		{"result", script("ok", `cat >/dev/null; echo '{"cniVersion":"1.1.0","ips":[{"address":"10.250.0.2/24"}]}'`), add, "ok", 0},
		{"cni error", script("err", `echo '{"cniVersion":"1.1.0","code":11,"msg":"store locked"}'; exit 1`), add, "code 11", 11},
		{"panic", script("panic", `echo 'panic: boom' >&2; echo 'goroutine 1 [running]:' >&2; exit 2`), add, "PANIC", 0},
		{"noise on stdout", script("noise", `echo '{"cniVersion":"1.1.0","ips":[]}'; echo 'debug: hello'`), add, "bad stdout", 0},
		{"failure without error object", script("bare", `echo oops; exit 1`), add, "bad stdout", 0},
		{"killed", script("killed", `kill -9 $$`), add, "signal killed", 0},
		{"env is clean", script("env", `[ -z "$SHOULD_NOT_LEAK" ] && [ "$CNI_COMMAND" = DEL ] && [ -z "$CNI_ARGS" ] || exit 3`), cniCall{Command: "DEL", ContainerID: "c1", IfName: "eth0"}, "ok", 0},
	}
	t.Setenv("SHOULD_NOT_LEAK", "1")
	t.Setenv("CNI_ARGS", "leaked")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.p.CNI(tc.call)
			if o.Kind() != tc.kind {
				t.Fatalf("kind %q, want %q: %s", o.Kind(), tc.kind, o.Describe())
			}
			if tc.code != 0 && (o.Err == nil || o.Err.Code != tc.code) {
				t.Fatalf("error %v, want code %d", o.Err, tc.code)
			}
		})
	}
	if r := cases[0].p.CNI(add); r.Result == nil || len(r.Result.Addrs()) != 1 || r.Result.Addrs()[0] != "10.250.0.2" {
		t.Fatalf("result not parsed: %+v", r.Result)
	}
}
