//go:build reliability

package reliability

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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stickyip/stickyip/admin"
)

// Names shared by every suite.
const (
	annoDuration   = "io.kubernetes.cri/reserved-ip-duration"
	capAnnotations = "io.kubernetes.cri.pod-annotations"
	dbName         = "stickyip.db"
	lockName       = "stickyip.lock"
	testCNIVersion = "1.1.0"
	// processTimeout bounds every plugin or tool process a suite starts.
	processTimeout = 90 * time.Second
)

// pluginPath returns the absolute path of the plugin binary under test.
func pluginPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("STICKYIP_BIN")
	if p == "" {
		p = filepath.Join("..", "..", "bin", "stickyip")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("plugin path %q: %v", p, err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("plugin binary %s not found or not executable (run `make build`, or set STICKYIP_BIN): %v", abs, err)
	}
	return abs
}

// cniCall is one invocation of the plugin as a CNI runtime would make it.
type cniCall struct {
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

// cniError is the CNI error object a plugin prints on stdout when it fails.
type cniError struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

// Text is the message and details together, what a person reads.
func (e *cniError) Text() string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + "; " + e.Details
}

func (e *cniError) String() string { return fmt.Sprintf("code %d: %s", e.Code, e.Text()) }

// cniIP is one entry of a CNI result's "ips".
type cniIP struct {
	Address   string `json:"address"`
	Gateway   string `json:"gateway,omitempty"`
	Interface *int   `json:"interface,omitempty"`
}

// cniResult is the part of a CNI 1.x result the suites look at.
type cniResult struct {
	CNIVersion string  `json:"cniVersion"`
	IPs        []cniIP `json:"ips"`
}

// Addrs returns the result's addresses without prefix length, sorted.
func (r *cniResult) Addrs() []string {
	var out []string
	for _, ip := range r.IPs {
		a, _, _ := strings.Cut(ip.Address, "/")
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// outcome is what one process did, as seen from outside.
type outcome struct {
	Stdout, Stderr []byte
	ExitCode       int            // -1 when killed by a signal
	Signal         syscall.Signal // the signal that ended it, if any
	Elapsed        time.Duration
	StartErr       error // the process could not be started or timed out
	TimedOut       bool

	// Parsed stdout (CNI calls only).
	Result    *cniResult
	Err       *cniError
	StdoutBad string // why stdout is not exactly one CNI object, if it is not
}

// Panicked reports whether the process died of a Go panic or fatal signal.
func (o *outcome) Panicked() bool {
	s := string(o.Stderr)
	for _, marker := range []string{"panic:", "fatal error:", "goroutine ", "SIGSEGV", "SIGBUS", "[signal "} {
		if strings.Contains(s, marker) {
			return true
		}
	}
	return false
}

// Describe summarises the outcome for failure messages.
func (o *outcome) Describe() string {
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
	fmt.Fprintf(&b, " elapsed=%v stdout=%q stderr=%q", o.Elapsed.Round(time.Millisecond), clip(o.Stdout, 600), clip(o.Stderr, 600))
	return b.String()
}

func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + fmt.Sprintf("…(%d bytes)", len(b))
}

// env returns the environment for a call: a minimal base (no CNI_* inherited
// from the test's own environment) plus the call's variables.
func (c cniCall) env(cniPath string) []string {
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

// plugin runs the binary under test.
type plugin struct {
	Path string
}

func newPlugin(t testing.TB) *plugin { return &plugin{Path: pluginPath(t)} }

// command prepares a CNI invocation without starting it.
func (p *plugin) command(ctx context.Context, c cniCall) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.CommandContext(ctx, p.Path)
	cmd.Env = c.env(filepath.Dir(p.Path))
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	return cmd, &stdout, &stderr
}

// CNI runs one CNI call to completion and parses its stdout.
func (p *plugin) CNI(c cniCall) *outcome {
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd, stdout, stderr := p.command(ctx, c)
	start := time.Now()
	err := cmd.Run()
	o := finish(cmd, err, stdout, stderr, time.Since(start), ctx)
	o.parseCNI(c.Command)
	return o
}

// finish fills an outcome from a finished process.
func finish(cmd *exec.Cmd, err error, stdout, stderr *bytes.Buffer, elapsed time.Duration, ctx context.Context) *outcome {
	o := &outcome{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Elapsed: elapsed}
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

// parseCNI checks that stdout holds exactly one JSON object and decodes it as
// a result (exit 0) or an error (exit != 0).
func (o *outcome) parseCNI(command string) {
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
		o.StdoutBad = fmt.Sprintf("stdout carries more than one JSON value: %q", clip(rest, 200))
	}
	if o.ExitCode != 0 {
		var e cniError
		if err := json.Unmarshal(raw, &e); err != nil || e.Code == 0 {
			o.StdoutBad = fmt.Sprintf("failed call without a CNI error object on stdout (%v)", err)
			return
		}
		o.Err = &e
		return
	}
	if command == "ADD" {
		var r cniResult
		if err := json.Unmarshal(raw, &r); err != nil {
			o.StdoutBad = fmt.Sprintf("ADD result does not decode: %v", err)
			return
		}
		o.Result = &r
	}
}

// Kind classifies an outcome for the "errors by kind" figures.
func (o *outcome) Kind() string {
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
func (o *outcome) OK() bool { return o.Kind() == "ok" }

// Tool runs the binary as the operator tool (no CNI_COMMAND).
func (p *plugin) Tool(args ...string) *outcome {
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	return p.ToolCtx(ctx, args...)
}

// ToolCtx is Tool with a caller-chosen deadline.
func (p *plugin) ToolCtx(ctx context.Context, args ...string) *outcome {
	cmd := exec.CommandContext(ctx, p.Path, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	return finish(cmd, err, &stdout, &stderr, time.Since(start), ctx)
}

// entry is one element of `stickyip list --json`: the operator tool's own type.
type entry = admin.Entry

// identityOf is an entry's pod identity, namespace/name/ifname.
func identityOf(e entry) string { return e.Namespace + "/" + e.Name + "/" + e.IfName }

// List runs `stickyip --data-dir DIR list --json` and decodes it.
func (p *plugin) List(t testing.TB, dataDir string) []entry {
	t.Helper()
	o := p.Tool("--data-dir", dataDir, "list", "--json")
	if o.ExitCode != 0 || o.Panicked() {
		t.Fatalf("stickyip list --json failed: %s", o.Describe())
	}
	var es []entry
	if err := json.Unmarshal(o.Stdout, &es); err != nil {
		t.Fatalf("stickyip list --json: output is not a JSON array of entries: %v: %s", err, clip(o.Stdout, 400))
	}
	return es
}

// Check runs `stickyip --data-dir DIR check` and returns its outcome.
func (p *plugin) Check(dataDir string) *outcome {
	return p.Tool("--data-dir", dataDir, "check")
}

// requireCheckOK fails the test unless `stickyip check` exits 0.
func (p *plugin) requireCheckOK(t testing.TB, dataDir, when string) {
	t.Helper()
	if o := p.Check(dataDir); o.ExitCode != 0 || o.Panicked() {
		t.Fatalf("%s: stickyip check reports problems: %s", when, o.Describe())
	}
}

// duplicateIPs returns the IPs that appear in more than one list entry of a network.
func duplicateIPs(es []entry) map[string][]entry {
	by := map[string][]entry{}
	for _, e := range es {
		k := e.Network + " " + e.IP
		by[k] = append(by[k], e)
	}
	dups := map[string][]entry{}
	for k, v := range by {
		if len(v) > 1 {
			dups[k] = v
		}
	}
	return dups
}

// netConf builds a network configuration as a runtime passes it to an IPAM
// plugin: the main plugin's config with an "ipam" block of type stickyip.
// Tests mutate the returned map before encoding it with encodeConf.
func netConf(network, dataDir, logFile string, ranges ...[]string) map[string]any {
	if len(ranges) == 0 {
		ranges = [][]string{{"10.250.0.0/24"}}
	}
	var rs []any
	for _, set := range ranges {
		var r []any
		for _, subnet := range set {
			r = append(r, map[string]any{"subnet": subnet})
		}
		rs = append(rs, r)
	}
	ipam := map[string]any{
		"type":    "stickyip",
		"dataDir": dataDir,
		// Never import the machine's own host-local state.
		"hostLocalDataDir": filepath.Join(filepath.Dir(dataDir), "no-host-local"),
		"lockTimeout":      "60s",
		"ranges":           rs,
	}
	if logFile != "" {
		ipam["logFile"] = logFile
	}
	return map[string]any{
		"cniVersion": testCNIVersion,
		"name":       network,
		"type":       "bridge",
		"ipam":       ipam,
	}
}

// withAnnotations returns a copy of conf whose runtimeConfig carries the pod
// annotations (nil: no runtimeConfig at all).
func withAnnotations(conf map[string]any, annotations map[string]string) map[string]any {
	out := make(map[string]any, len(conf)+1)
	for k, v := range conf {
		out[k] = v
	}
	if annotations != nil {
		out["runtimeConfig"] = map[string]any{capAnnotations: annotations}
	}
	return out
}

// withValidAttachments returns a copy of conf for a GC call.
func withValidAttachments(conf map[string]any, attachments [][2]string) map[string]any {
	out := make(map[string]any, len(conf)+1)
	for k, v := range conf {
		out[k] = v
	}
	list := []map[string]string{}
	for _, a := range attachments {
		list = append(list, map[string]string{"containerID": a[0], "ifname": a[1]})
	}
	out["cni.dev/valid-attachments"] = list
	return out
}

func encodeConf(t testing.TB, conf map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatalf("encode conf: %v", err)
	}
	return b
}

// podArgs is CNI_ARGS as containerd sets it.
func podArgs(namespace, name, uid, containerID string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
		namespace, name, containerID, uid)
}

// figures collects counters printed at the end of a suite.
type figures struct {
	mu sync.Mutex
	m  map[string]int
}

func (f *figures) add(k string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]int{}
	}
	f.m[k] += n
}

func (f *figures) get(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[k]
}

// String prints the counters sorted by name, one per line.
func (f *figures) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.m))
	for k := range f.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %d\n", k, f.m[k])
	}
	return b.String()
}

// report prints a suite's figures in a block that is easy to grep from CI logs.
func report(t testing.TB, suite string, f *figures, extra ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n=== FIGURES %s ===\n", suite)
	b.WriteString(f.String())
	for _, e := range extra {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	t.Log(b.String())
}
