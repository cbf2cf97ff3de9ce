package cni

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/ipam"
)

// netConf is a network config naming stickyip, with ipam keys added.
func netConf(t *testing.T, ipamKeys map[string]any) []byte {
	t.Helper()
	block := map[string]any{"type": "stickyip", "dataDir": t.TempDir(), "hostLocalDataDir": "",
		"ranges": []any{[]any{map[string]string{"subnet": "10.77.0.0/29"}}}}
	for k, v := range ipamKeys {
		block[k] = v
	}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "testnet", "type": "bridge", "ipam": block})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cmdArgs(conf []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "c1", Netns: "/proc/self/ns/net", IfName: "eth0", StdinData: conf}
}

// TestRunErrors: whatever goes wrong in a call comes back as the CNI
// error the runtime shows: a config error naming the key (and the call's
// work never runs), the call's own error mapped to its code, a panic as an
// internal error naming it.
func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conf     []byte
		fn       func(*Call) error
		code     uint
		msg      string
		workRuns bool
	}{{
		name: "config", conf: netConf(t, map[string]any{"lockTimeout": "soon"}),
		code: types.ErrInvalidNetworkConfig, msg: "ipam.lockTimeout",
	}, {
		name: "the call's error", conf: netConf(t, nil), workRuns: true,
		fn:   func(*Call) error { return ipam.ErrPoolExhausted },
		code: CodePoolExhausted, msg: ipam.ErrPoolExhausted.Error(),
	}, {
		name: "panic", conf: netConf(t, nil), workRuns: true,
		fn:   func(*Call) error { panic("boom") },
		code: types.ErrInternal, msg: "stickyip internal error: boom",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			err := Run(cmdArgs(tc.conf), func(c *Call) error { ran = true; return tc.fn(c) })
			var te *types.Error
			if !errors.As(err, &te) || te.Code != tc.code || !strings.Contains(te.Msg, tc.msg) {
				t.Fatalf("error %#v, want a CNI error of code %d saying %q", err, tc.code, tc.msg)
			}
			if ran != tc.workRuns {
				t.Fatalf("the call's work ran: %v, want %v", ran, tc.workRuns)
			}
		})
	}
	if err := Run(cmdArgs(netConf(t, nil)), func(*Call) error { return nil }); err != nil {
		t.Fatalf("a call that succeeds: %v", err)
	}
}

// TestRunLogs: with ipam.logFile the call's lines (Info and up) go to
// that file, times in UTC, a failed call's error with its container; a
// log file that cannot be opened does not fail the call.
func TestRunLogs(t *testing.T) {
	was := time.Local
	time.Local = time.FixedZone("east", 3*3600)
	t.Cleanup(func() { time.Local = was })

	logFile := filepath.Join(t.TempDir(), "stickyip.log")
	conf := netConf(t, map[string]any{"logFile": logFile})
	err := Run(cmdArgs(conf), func(c *Call) error {
		c.Log.Info("allocated", "ip", "10.77.0.2")
		return ipam.ErrIPUnavailable
	})
	if err == nil {
		t.Fatal("the call's error was dropped")
	}
	b, _ := os.ReadFile(logFile)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "msg=allocated") || !strings.Contains(lines[0], "ip=10.77.0.2") ||
		!strings.Contains(lines[1], "msg=\"call failed\"") || !strings.Contains(lines[1], "container=c1") {
		t.Fatalf("log file:\n%s\nwant the call's line, then its failure naming container c1", b)
	}
	for _, l := range lines {
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasSuffix(ts, "Z") || time.Since(at) > time.Minute {
			t.Fatalf("log line %q: its time %q is not now in UTC (%v)", l, ts, err)
		}
	}

	unopenable := netConf(t, map[string]any{"logFile": filepath.Join(t.TempDir(), "missing", "stickyip.log")})
	if err := Run(cmdArgs(unopenable), func(c *Call) error { c.Log.Warn("logged"); return nil }); err != nil {
		t.Fatalf("with a log file that cannot be opened: %v", err)
	}
}
