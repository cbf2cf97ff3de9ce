package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/reservation"
)

// CNICall is one invocation of the plugin as a CNI runtime would make it.
type CNICall struct {
	Command     string // CNI_COMMAND; empty leaves it unset
	ContainerID string
	Netns       string
	IfName      string
	Args        string // CNI_ARGS; empty leaves it unset
	Stdin       []byte
	// Env adds or overrides variables (applied after the CNI_* ones).
	Env map[string]string
	// Unset removes variables after Env is applied (e.g. "CNI_IFNAME").
	Unset []string
}

// CNIError is the CNI error object a plugin prints on stdout when it fails.
type CNIError struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

// Text is the message and details together, what a person reads.
func (e *CNIError) Text() string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + "; " + e.Details
}

func (e *CNIError) String() string { return fmt.Sprintf("code %d: %s", e.Code, e.Text()) }

// CNIIP is one entry of a CNI result's "ips".
type CNIIP struct {
	Address   string `json:"address"`
	Gateway   string `json:"gateway,omitempty"`
	Interface *int   `json:"interface,omitempty"`
}

// CNIResult is the part of a CNI 1.x result the tests look at.
type CNIResult struct {
	CNIVersion string  `json:"cniVersion"`
	IPs        []CNIIP `json:"ips"`
	// Raw is the result as printed (cnitool's results only).
	Raw string `json:"-"`
}

// Addrs returns the result's addresses without prefix length, sorted.
func (r *CNIResult) Addrs() []string {
	var out []string
	for _, ip := range r.IPs {
		a, _, _ := strings.Cut(ip.Address, "/")
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Outcome is what one process did, as seen from outside.
type Outcome struct {
	Stdout, Stderr []byte
	ExitCode       int            // -1 when killed by a signal
	Signal         syscall.Signal // the signal that ended it, if any
	Elapsed        time.Duration
	StartErr       error // the process could not be started or timed out
	TimedOut       bool

	// Parsed stdout (CNI calls only).
	Result    *CNIResult
	Err       *CNIError
	StdoutBad string // why stdout is not exactly one CNI object, if it is not
}

// Panicked reports whether the process died of a Go panic or fatal signal.
func (o *Outcome) Panicked() bool {
	s := string(o.Stderr)
	for _, marker := range []string{"panic:", "fatal error:", "goroutine ", "SIGSEGV", "SIGBUS", "[signal "} {
		if strings.Contains(s, marker) {
			return true
		}
	}
	return false
}

// Describe summarises the Outcome for failure messages.
func (o *Outcome) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit=%d", o.ExitCode)
	if o.Signal != 0 {
		fmt.Fprintf(&b, " signal=%v", o.Signal)
	}
	if o.TimedOut {
		b.WriteString(" TIMED OUT")
	}
	if o.StartErr != nil {
		fmt.Fprintf(&b, " start/wait error=%v", o.StartErr)
	}
	fmt.Fprintf(&b, " elapsed=%v stdout=%q stderr=%q", o.Elapsed.Round(time.Millisecond), Clip(o.Stdout, 600), Clip(o.Stderr, 600))
	return b.String()
}

func Clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + fmt.Sprintf("…(%d bytes)", len(b))
}

// env returns the environment for a call: a minimal base (no CNI_* inherited
// from the test's own environment) plus the call's variables.
func (c CNICall) Environ(cniPath string) []string {
	m := map[string]string{
		"PATH": os.Getenv("PATH"),
		"HOME": os.Getenv("HOME"),
	}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("CNI_COMMAND", c.Command)
	set("CNI_CONTAINERID", c.ContainerID)
	set("CNI_NETNS", c.Netns)
	set("CNI_IFNAME", c.IfName)
	set("CNI_ARGS", c.Args)
	if c.Command != "" {
		set("CNI_PATH", cniPath)
	}
	for k, v := range c.Env {
		m[k] = v
	}
	for _, k := range c.Unset {
		delete(m, k)
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Plugin runs a CNI plugin binary (stickyip, or host-local for comparison)
// the way a runtime does: one process per call, the CNI environment, the
// network config on stdin.
type Plugin struct {
	// Path is the binary.
	Path string
	// Netns, when set, runs the process inside that network namespace (the
	// node's), with nsenter, as the runtime of that node would.
	Netns *Netns
	// Timeout bounds every process (default DefaultProcessTimeout).
	Timeout time.Duration
}

// DefaultProcessTimeout bounds a plugin or tool process when Plugin.Timeout is zero.
const DefaultProcessTimeout = 90 * time.Second

func (p *Plugin) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultProcessTimeout
}

// argv is the command line that runs the binary with args (inside Netns when set).
func (p *Plugin) argv(args ...string) []string {
	if p.Netns == nil {
		return append([]string{p.Path}, args...)
	}
	return append([]string{"nsenter", "--net=" + p.Netns.Path, "--", p.Path}, args...)
}

// command prepares a CNI invocation without starting it.
func (p *Plugin) Command(ctx context.Context, c CNICall) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	argv := p.argv()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = c.Environ(filepath.Dir(p.Path))
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	return cmd, &stdout, &stderr
}

// CNI runs one CNI call to completion and parses its stdout.
func (p *Plugin) CNI(c CNICall) *Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	cmd, stdout, stderr := p.Command(ctx, c)
	start := time.Now()
	err := cmd.Run()
	o := Collect(cmd, err, stdout, stderr, time.Since(start), ctx)
	o.ParseCNI(c.Command)
	return o
}

// finish fills an Outcome from a finished process.
func Collect(cmd *exec.Cmd, err error, stdout, stderr *bytes.Buffer, elapsed time.Duration, ctx context.Context) *Outcome {
	o := &Outcome{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Elapsed: elapsed}
	if ctx != nil && ctx.Err() != nil {
		o.TimedOut = true
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
	default:
		o.StartErr = err
	}
	if cmd.ProcessState != nil {
		o.ExitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			o.Signal = ws.Signal()
		}
	} else {
		o.ExitCode = -1
	}
	return o
}

// ParseCNI checks that stdout holds exactly one JSON object and decodes it as
// a result (exit 0) or an error (exit != 0).
func (o *Outcome) ParseCNI(command string) {
	if o.Signal != 0 || o.StartErr != nil {
		return
	}
	dec := json.NewDecoder(bytes.NewReader(o.Stdout))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if len(bytes.TrimSpace(o.Stdout)) == 0 && o.ExitCode == 0 && command != "ADD" && command != "VERSION" {
			return // DEL, CHECK, GC print nothing on success
		}
		o.StdoutBad = fmt.Sprintf("stdout is not a JSON object: %v", err)
		return
	}
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) != 0 {
		o.StdoutBad = fmt.Sprintf("stdout carries more than one JSON value: %q", Clip(rest, 200))
	}
	if o.ExitCode != 0 {
		var e CNIError
		if err := json.Unmarshal(raw, &e); err != nil || e.Code == 0 {
			o.StdoutBad = fmt.Sprintf("failed call without a CNI error object on stdout (%v)", err)
			return
		}
		o.Err = &e
		return
	}
	if command == "ADD" {
		var r CNIResult
		if err := json.Unmarshal(raw, &r); err != nil {
			o.StdoutBad = fmt.Sprintf("ADD result does not decode: %v", err)
			return
		}
		o.Result = &r
	}
}

// Kind classifies an Outcome for the "errors by kind" figures.
func (o *Outcome) Kind() string {
	switch {
	case o.TimedOut:
		return "timeout"
	case o.Panicked():
		return "PANIC"
	case o.Signal != 0:
		return "signal " + o.Signal.String()
	case o.StartErr != nil:
		return "start error"
	case o.StdoutBad != "":
		return "bad stdout"
	case o.Err != nil:
		return fmt.Sprintf("code %d", o.Err.Code)
	case o.ExitCode != 0:
		return fmt.Sprintf("exit %d", o.ExitCode)
	}
	return "ok"
}

// OK reports a clean success: exit 0, no panic, well-formed stdout.
func (o *Outcome) OK() bool { return o.Kind() == "ok" }

// Tool runs the binary as the operator tool (no CNI_COMMAND).
func (p *Plugin) Tool(args ...string) *Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	return p.ToolCtx(ctx, args...)
}

// ToolCommand prepares an operator-tool invocation without starting it.
func (p *Plugin) ToolCommand(ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	argv := p.argv(args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	return cmd, &stdout, &stderr
}

// ToolCtx is Tool with a caller-chosen deadline.
func (p *Plugin) ToolCtx(ctx context.Context, args ...string) *Outcome {
	cmd, stdout, stderr := p.ToolCommand(ctx, args...)
	start := time.Now()
	err := cmd.Run()
	return Collect(cmd, err, stdout, stderr, time.Since(start), ctx)
}

// List runs `stickyip --data-dir DIR list --json` (plus args) and decodes it
// into the operator tool's own type.
func (p *Plugin) List(t testing.TB, dataDir string, args ...string) []admin.Entry {
	t.Helper()
	o := p.Tool(append([]string{"--data-dir", dataDir, "list", "--json"}, args...)...)
	if o.ExitCode != 0 || o.Panicked() {
		t.Fatalf("stickyip list --json failed: %s", o.Describe())
	}
	var es []admin.Entry
	if err := json.Unmarshal(o.Stdout, &es); err != nil {
		t.Fatalf("stickyip list --json: output is not a JSON array of entries: %v: %s", err, Clip(o.Stdout, 400))
	}
	return es
}

// Held is List without the cooling entries: the addresses that a pod holds
// (allocated) or that are kept for one (reserved). A cooling entry is a free
// address the allocator skips for reservation.reuseDelay; it must belong to
// nobody, which Held checks.
func (p *Plugin) Held(t testing.TB, dataDir string, args ...string) []admin.Entry {
	t.Helper()
	var held []admin.Entry
	for _, e := range p.List(t, dataDir, args...) {
		if e.State != string(reservation.Cooling) {
			held = append(held, e)
			continue
		}
		if e.ContainerID != "" || e.Namespace != "" || e.Name != "" || e.UID != "" || e.ExpiresAt == nil {
			t.Errorf("cooling entry %s belongs to someone or never expires: %+v", e.IP, e)
		}
	}
	return held
}

// Check runs `stickyip --data-dir DIR check` and returns its outcome.
func (p *Plugin) Check(dataDir string) *Outcome {
	return p.Tool("--data-dir", dataDir, "check")
}

// RequireCheckOK fails the test unless `stickyip check` exits 0.
func (p *Plugin) RequireCheckOK(t testing.TB, dataDir, when string) {
	t.Helper()
	if o := p.Check(dataDir); o.ExitCode != 0 || o.Panicked() {
		t.Fatalf("%s: stickyip check reports problems: %s", when, o.Describe())
	}
}
