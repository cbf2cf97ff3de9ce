//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// logLine is one line of a slog text log (the plugin's, checkpointd's):
// its time and its key=value pairs.
type logLine struct {
	at     time.Time
	fields map[string]string
}

// parseLogfmt splits a slog text line into its keys and values (quoted
// values unquoted); ok is false for a line that is not one.
func parseLogfmt(line string) (logLine, bool) {
	out := logLine{fields: map[string]string{}}
	s := line
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		k, rest, found := strings.Cut(s, "=")
		if !found || strings.ContainsRune(k, ' ') {
			return out, false
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return out, false
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		out.fields[k] = v
		s = rest
	}
	t, err := time.Parse(time.RFC3339Nano, out.fields["time"])
	if err != nil {
		return out, false
	}
	out.at = t
	return out, true
}

// readLogfmt returns the slog lines of the file at path.
func readLogfmt(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if l, ok := parseLogfmt(sc.Text()); ok {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// raceOf tells, from n's plugin log and checkpointd's log (one clock),
// how the release of old's address (its StatefulSet deleted at since)
// raced the ADD of its successor now: when old's sandbox had its DEL, when
// checkpointd released the address (before the DEL: the running pod's
// reservation given up, so that its DEL frees it; after: the held one),
// and when the new pod's ADD ran and what it got.
func (n *node) raceOf(ns string, old, now placedPod, since time.Time) string {
	plugin, err := readLogfmt(filepath.Join(n.logDir, "var-log", "stickyip.log"))
	if err != nil {
		return "the plugin's log: " + err.Error()
	}
	daemon, err := readLogfmt(filepath.Join(n.logDir, "checkpointd.log"))
	if err != nil {
		return "checkpointd's log: " + err.Error()
	}
	pod := ns + "/" + old.Name
	var container string
	for _, l := range plugin {
		if l.fields["msg"] == "ADD" && l.fields["pod"] == pod && l.fields["ips"] == "["+old.IP+"]" && l.at.Before(since) {
			container = l.fields["container"]
		}
	}
	var del, rel, add time.Time
	var got string
	for _, l := range plugin {
		switch {
		case container != "" && del.IsZero() && l.fields["msg"] == "DEL" && l.fields["container"] == container:
			del = l.at
		case !del.IsZero() && add.IsZero() && l.fields["msg"] == "ADD" && l.fields["pod"] == pod:
			add, got = l.at, l.fields["ips"]
		}
	}
	for _, l := range daemon {
		if rel.IsZero() && !l.at.Before(since) && l.fields["ip"] == old.IP &&
			strings.HasPrefix(l.fields["msg"], "reservation released") && l.fields["pod"] == pod {
			rel = l.at
		}
	}
	if del.IsZero() || add.IsZero() {
		return fmt.Sprintf("the logs show no DEL of its old sandbox %q or no ADD after it", container)
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		if t.Before(del) {
			return del.Sub(t).Round(time.Millisecond).String() + " before it"
		}
		return "+" + t.Sub(del).Round(time.Millisecond).String()
	}
	verdict := "the new pod's ADD came before any release"
	if !rel.IsZero() {
		if rel.Before(add) {
			verdict = fmt.Sprintf("released %s before the new pod's ADD", add.Sub(rel).Round(time.Millisecond))
		} else {
			verdict = fmt.Sprintf("the new pod's ADD came %s before the release", rel.Sub(add).Round(time.Millisecond))
		}
	}
	return fmt.Sprintf("old sandbox's DEL %s, checkpointd's release %s, the new pod's ADD %s (got %s): %s",
		del.UTC().Format("15:04:05.000"), when(rel), when(add), got, verdict)
}

// auditStatefulSetRequests counts, by user and verb, the StatefulSet
// requests (any subresource) of the users who matches between from and
// to, as the API server received them (the audit policy logs the nodes'
// and stickyip-controller's).
func (cp *controlPlane) auditStatefulSetRequests(who func(user string) bool, from, to time.Time) map[string]map[string]int {
	cp.t.Helper()
	f, err := os.Open(cp.auditLogPath())
	if err != nil {
		cp.t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var ev struct {
			Verb  string `json:"verb"`
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource string `json:"resource"`
			} `json:"objectRef"`
			Received time.Time `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		if ev.Stage != "RequestReceived" || ev.ObjectRef.Resource != "statefulsets" || !who(ev.User.Username) ||
			ev.Received.Before(from) || !ev.Received.Before(to) {
			continue
		}
		if out[ev.User.Username] == nil {
			out[ev.User.Username] = map[string]int{}
		}
		out[ev.User.Username][ev.Verb]++
	}
	if err := sc.Err(); err != nil {
		cp.t.Fatal(err)
	}
	return out
}

// placementControllerStarted is when the running stickyip-controller was
// started.
func (cp *controlPlane) placementControllerStarted() time.Time {
	cp.t.Helper()
	if cp.placementController == nil {
		cp.t.Fatal("stickyip-controller is not running")
	}
	return cp.placementController.started
}
