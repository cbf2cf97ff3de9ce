//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/test/harness"
)

// The disruption table: what each disruption costs a 3-member etcd
// cluster whose members know each other by pod IP (etcd_app_test.go), as
// its users would check it: the pods' IPs, `etcdctl member list` (the
// addresses the members are listed at), `etcdctl endpoint health` of the
// addresses clients know (the member list's client URLs before the
// disruption), and a key written before, read after.
//
// The same rows run twice: with stickyip (TestCluster's etcd step: the
// plugin, checkpointd and deploy/placement on the nodes; the pods ask for
// placement required) and on host-local as the control
// (TestClusterInstall's etcd-host-local step, after the uninstall: kube-
// flannel's own conflist, no checkpointd, no placement).

// etcdRowLimit bounds how long a row waits for the cluster to settle.
// A row is judged over a window, not on one look (observe): the window
// holds at least etcdWindowLooks looks, one a second, and lasts until
// every member, as it runs at the end (its pod and container), has had a
// periodic resync of its node's kubelet after it was seen running, and
// etcdLooksAfterResync looks more: a resync is where the kubelet re-creates
// a sandbox or restarts a container, so what it would undo shows in the
// window (a window ending 1.5 × kubeletSyncFrequency after the disruption
// ended would, for delete-all, end about 3 s after the members were back,
// before their first resync). Every restart seen in the window counts.
const (
	etcdRowLimit         = 3 * time.Minute
	etcdWindowLooks      = 3
	etcdLooksAfterResync = 2
)

// etcdDisruption is a row of the table: what is done to the cluster, and
// what proves it was done.
type etcdDisruption struct {
	name string
	// do disrupts; r.target is the node to act on, r.victim a member of it.
	// A restart of a component proves itself (etcdRound.restartedProcess).
	do func(r *etcdRound)
	// restarts is how many members the disruption re-creates or restarts
	// (their pod or container new): a row whose members restarted
	// otherwise did not disrupt as it says, or disrupted more.
	restarts func(r *etcdRound) int
	// process: the disruption restarts this component of the node.
	process string
	// checkpointd: the row needs the node's checkpointd (n/a without it;
	// the stickyip run fails then).
	checkpointd bool
	// On host-local (the control, asserted): each member restarted comes
	// back at another IP (newIPs); the cluster loses its quorum
	// (quorumLost); neither: the cluster is back as it was.
	newIPs, quorumLost bool
}

// One member, all three, or the target node's.
func oneMember(*etcdRound) int  { return 1 }
func allMembers(*etcdRound) int { return etcdReplicas }
func noMember(*etcdRound) int   { return 0 }
func onTarget(r *etcdRound) int { return r.onTarget }

// etcdDisruptions are the rows, in the table's order.
var etcdDisruptions = []etcdDisruption{
	{name: "delete one member", restarts: oneMember, newIPs: true, do: func(r *etcdRound) { r.a.c.deletePod(r.a.ns, r.victim) }},
	{name: "delete all three at once", restarts: allMembers, newIPs: true, quorumLost: true, do: func(r *etcdRound) {
		for _, name := range etcdMemberNames {
			r.a.c.deletePod(r.a.ns, name)
		}
	}},
	{name: "eviction (Eviction API)", restarts: oneMember, newIPs: true, do: func(r *etcdRound) { r.evict(r.victim) }},
	{name: "drain + uncordon", restarts: onTarget, newIPs: true, quorumLost: true, do: (*etcdRound).drain},
	{name: "node reboot, API server up", restarts: onTarget, newIPs: true, do: (*etcdRound).reboot},
	{name: "kubelet restart", restarts: noMember, process: "kubelet", do: func(r *etcdRound) {
		old := r.target.kubelet
		old.stop(r.a.c.t, syscall.SIGTERM, 30*time.Second)
		r.target.startKubelet(false)
		r.target.waitKubeletHealthy()
		r.restartedProcess(old.cmd.Process.Pid, r.target.kubelet.cmd.Process.Pid)
	}},
	{name: "containerd restart", restarts: noMember, process: "containerd", do: func(r *etcdRound) {
		old := r.target.ctd.PID()
		r.target.restartContainerd()
		r.restartedProcess(old, r.target.ctd.PID())
	}},
	{name: "checkpointd restart", restarts: noMember, process: "checkpointd", checkpointd: true, do: func(r *etcdRound) {
		old := r.target.checkpointd
		old.stop(r.a.c.t, syscall.SIGTERM, 30*time.Second)
		r.target.startCheckpointd()
		r.restartedProcess(old.cmd.Process.Pid, r.target.checkpointd.cmd.Process.Pid)
	}},
	{name: "ballast on the node, member deleted", restarts: oneMember, newIPs: true, do: (*etcdRound).ballast},
}

// table founds the cluster once, runs every row on it (with stickyip each
// row is asserted back as it was, and must leave the cluster so: nothing
// repairs it between rows; the control is asserted broken as the docs say,
// and then repaired as an operator would, which its row says), prints the
// table and writes it to _output/e2e-logs/<test>/etcd-<mode>.md.
func (a *etcdApp) table() []etcdRow {
	start := time.Now()
	a.found()
	var rows []etcdRow
	for _, d := range etcdDisruptions {
		row := a.row(d)
		a.saveLogs()
		if !a.sticky && row.na == "" {
			row.note = strings.Trim(row.note+"; "+a.restore(), "; ")
		}
		rows = append(rows, row)
	}
	md := formatEtcdTable(rows)
	a.c.t.Logf("etcd disruption table (%s), %d rows in %s:\n%s", a.mode(), len(rows), time.Since(start).Round(time.Second), md)
	name := "etcd-host-local.md"
	if a.sticky {
		name = "etcd-stickyip.md"
	}
	writeFile(a.c.t, filepath.Join(filepath.Dir(a.c.nodes[0].logDir), name), []byte(md), 0o644)
	for _, d := range docTableDiffers(etcdDocPath, strings.TrimSuffix(name, ".md"), md, a.sticky) {
		a.c.t.Errorf("%s: %s (paste the table printed above, %s, with the run's date)", etcdDocPath, d, name)
	}
	return rows
}

// etcdDocPath is the page whose tables this step prints (from test/e2e).
const etcdDocPath = "README.md"

// docTableDiffers compares the table a run printed (md) with the one
// test/e2e/README.md shows under the line "<!-- <marker> -->", in the columns no
// run changes: the rows, in order; each row not run ("n/a"); whether it came
// back ("back in": a time, or "not back"); the members restarted, but for
// the rows that restart the node's members (how many it runs depends on
// where the scheduler put them); and with stickyip, where every row must
// be back as it was, the IPs kept, the member list, the endpoints' health
// and the key. The times and the "how" move from run to run. It returns
// what differs (the page must say what the runs measured).
func docTableDiffers(doc, marker, md string, sticky bool) []string {
	page, err := os.ReadFile(doc)
	if err != nil {
		return []string{err.Error()}
	}
	rows := func(text string) [][]string {
		var out [][]string
		for _, l := range strings.Split(text, "\n") {
			l = strings.TrimSpace(l)
			if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "|---") || strings.HasPrefix(l, "| disruption |") {
				continue
			}
			out = append(out, strings.Split(strings.Trim(l, "| "), " | "))
		}
		return out
	}
	_, after, ok := strings.Cut(string(page), "\n<!-- "+marker+" -->\n")
	if !ok {
		return []string{fmt.Sprintf("no table marked <!-- %s --> on a line of its own", marker)}
	}
	table, _, _ := strings.Cut(after, "\n\n")
	shown, printed := rows(table), rows(md)
	if len(shown) != len(printed) {
		return []string{fmt.Sprintf("the %s table has %d rows, the run printed %d", marker, len(shown), len(printed))}
	}
	stable := []int{1}
	if sticky {
		stable = append(stable, 2, 3, 4, 5)
	}
	var out []string
	for i := range printed {
		p, s := printed[i], shown[i]
		cell := func(r []string, j int) string {
			if j < len(r) {
				return strings.TrimSpace(r[j])
			}
			return ""
		}
		if cell(p, 0) != cell(s, 0) {
			out = append(out, fmt.Sprintf("the %s table's row %d is %q, the run's %q", marker, i+1, cell(s, 0), cell(p, 0)))
			continue
		}
		na := func(r []string) bool { return strings.HasPrefix(cell(r, 1), "n/a") }
		if na(p) || na(s) {
			if cell(p, 1) != cell(s, 1) {
				out = append(out, fmt.Sprintf("%s, %q: %q, the run printed %q", marker, cell(p, 0), cell(s, 1), cell(p, 1)))
			}
			continue
		}
		back := func(r []string) bool { return cell(r, 6) != "not back" }
		if back(p) != back(s) {
			out = append(out, fmt.Sprintf("%s, %q: back in %q, the run printed %q", marker, cell(p, 0), cell(s, 6), cell(p, 6)))
		}
		for _, j := range stable {
			if j == 1 && onTargetRow(cell(p, 0)) {
				continue
			}
			if cell(p, j) != cell(s, j) {
				out = append(out, fmt.Sprintf("%s, %q, column %d: %q, the run printed %q", marker, cell(p, 0), j+1, cell(s, j), cell(p, j)))
			}
		}
	}
	return out
}

// onTargetRow reports whether row restarts every member of the node acted
// on (their number is where the scheduler put them).
func onTargetRow(row string) bool {
	for _, d := range etcdDisruptions {
		if d.name == row {
			return reflect.ValueOf(d.restarts).Pointer() == reflect.ValueOf(onTarget).Pointer()
		}
	}
	return false
}

// mode names the table's run.
func (a *etcdApp) mode() string {
	switch {
	case a.sticky:
		return "stickyip"
	case a.c.nodes[0].checkpointd != nil:
		return "stickyip without the opt-in, its control"
	}
	return "host-local, the control"
}

// etcdRound is one row's run.
type etcdRound struct {
	a        *etcdApp
	target   *node  // the node acted on: the one running the most members
	victim   string // a member on target
	onTarget int    // members on target
	note     string // what the disruption itself showed (drain: where the members went; a restart: that it happened)
	// restarted: the component the row restarts runs as a new process
	// (restartedProcess).
	restarted bool
	// after, when set, undoes what the disruption left once the row has
	// looked (the ballast).
	after func()
}

// restartedProcess records a component's restart from process old to new:
// proven when the new process runs and the old one is gone.
func (r *etcdRound) restartedProcess(old, now int) {
	r.restarted = old != 0 && now != 0 && old != now && !harness.Alive(old) && harness.Alive(now)
	if r.restarted {
		r.note = "restarted: a new process"
	} else {
		r.note = fmt.Sprintf("not restarted: pid %d, then %d", old, now)
	}
}

// etcdBefore is the cluster as a row starts.
type etcdBefore struct {
	pods      map[string]etcdPod
	members   []etcdMember
	endpoints []string // the member list's client URLs: what clients know
	key, val  string
}

// etcdRow is a row's outcome.
type etcdRow struct {
	name      string
	na        string // why the row did not run ("": it ran)
	restarted int    // members whose pod (re-created) or container (restarted) is new
	kept      int    // members with the IP they had
	moved     []string
	list      string // the member list against the one before
	healthy   int    // endpoints (the addresses clients know) healthy
	key       string // the key written before: "read", or what happened
	placement string // the node terms the re-created pods carry
	running   bool   // the three pods run (with an IP)
	back      time.Duration
	looks     int // looks in the window the row was judged over
	note      string
	ok        bool
	pods      map[string]etcdPod // the look's pods
	resynced  string             // the members' kubelet resyncs in the window
}

// row runs disruption d on the cluster as the row before left it (it must
// be as founded: with stickyip nothing repairs it between rows, and the
// control's rows are repaired after each): a key written, the disruption,
// then the cluster observed until it has settled (observe). Every row must
// show its disruption happened: as many members restarted as it restarts,
// and the component it restarts a new process.
func (a *etcdApp) row(d etcdDisruption) etcdRow {
	t := a.c.t
	r := &etcdRound{a: a}
	if d.checkpointd && a.c.nodes[0].checkpointd == nil {
		if a.sticky {
			t.Errorf("etcd row %q (%s): no checkpointd on the nodes: the row cannot run, and the stickyip table does not pass without it", d.name, a.mode())
		}
		return etcdRow{name: d.name, na: "no checkpointd on the nodes"}
	}
	began := time.Now()
	if ok, why := a.asFounded(); !ok {
		t.Fatalf("etcd row %q (%s): the cluster is not as founded when the row starts (%s): the row before left it broken", d.name, a.mode(), why)
	}
	if a.sticky {
		a.waitPublished()
	}
	ready := time.Since(began)
	b := a.before(d.name)
	r.target, r.victim, r.onTarget = targetOf(a.c, b.pods)
	t.Logf("etcd row %q (%s): on %s, member %s", d.name, a.mode(), r.target.name, r.victim)
	start := time.Now()
	d.do(r)
	row := a.observe(b, start)
	row.name, row.note = d.name, strings.Trim(r.note+"; "+row.note, "; ")
	if r.after != nil {
		r.after()
	}
	if want := d.restarts(r); row.restarted != want {
		t.Errorf("etcd row %q (%s): %d members restarted, want %d: the disruption did not happen as the row says (%s)", d.name, a.mode(), row.restarted, want, row)
	}
	if d.process != "" && !r.restarted {
		t.Errorf("etcd row %q (%s): %s on %s was not restarted (%s)", d.name, a.mode(), d.process, r.target.name, r.note)
	}
	if a.sticky {
		a.assertKept(row)
	} else {
		a.assertBroken(d, b, row)
	}
	t.Logf("etcd row %q (%s): %s; %s (the row took %s, %s of it to check the cluster and wait for its placement entries)", d.name, a.mode(), row, row.resynced,
		time.Since(began).Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
	return row
}

// assertKept fails the test unless a row with stickyip is back as it was
// and every re-created pod carries the required node affinity its
// template asks for (stickyip.io/placement: required).
func (a *etcdApp) assertKept(row etcdRow) {
	t := a.c.t
	t.Helper()
	if !row.ok {
		t.Errorf("etcd row %q with stickyip: %s", row.name, row)
	}
	for _, term := range strings.Split(row.placement, ", ") {
		if term != "" && !strings.HasPrefix(term, "required ") {
			t.Errorf("etcd row %q: a re-created member's node term is %q, want the required one its annotation asks for", row.name, term)
		}
	}
}

// assertBroken fails the test unless the control's row shows what the
// docs say host-local costs: every restarted member at another IP, and
// clients that know the old addresses lose that member — at its old client
// address nothing answers, or another member does — (newIPs); the quorum
// lost — no member answers `member list`, no endpoint healthy —
// (quorumLost); or, for neither, the cluster back as it was.
func (a *etcdApp) assertBroken(d etcdDisruption, b etcdBefore, row etcdRow) {
	t := a.c.t
	t.Helper()
	if d.newIPs && row.kept != etcdReplicas-row.restarted {
		t.Errorf("control: %q kept %d of %d IPs with %d members restarted, want each restarted member at another IP: %s", row.name, row.kept, etcdReplicas, row.restarted, row)
	}
	if d.newIPs {
		var lost []string
		for _, name := range etcdMemberNames {
			was, now := b.pods[name], row.pods[name]
			if now.IP == "" || now.IP == was.IP {
				continue
			}
			id := ""
			for _, m := range b.members {
				if m.Name == name {
					id = m.ID
				}
			}
			old := etcdClientURL(was.IP)
			switch at, err := a.client.memberAt(old); {
			case id == "":
				t.Errorf("control: %q: %s is not in the member list read before the row", row.name, name)
			case err == nil && at == id:
				t.Errorf("control: %q: %s moved to %s, yet clients still reach it at %s, which this page says they lose", row.name, name, now.IP, old)
			case err != nil:
				lost = append(lost, fmt.Sprintf("%s (nothing answers at %s)", name, urlHost(old)))
			default:
				lost = append(lost, fmt.Sprintf("%s (another member answers at %s)", name, urlHost(old)))
			}
		}
		t.Logf("control: %q: clients that know the old addresses lose %s", row.name, strings.Join(lost, ", "))
	}
	if d.quorumLost && (row.healthy != 0 || !strings.HasPrefix(row.list, "not read")) {
		t.Errorf("control: %q did not lose the quorum (want no member answering member list, 0 healthy): %s", row.name, row)
	}
	if !d.newIPs && !d.quorumLost && !row.ok {
		t.Errorf("control: %q is not back as it was: %s", row.name, row)
	}
}

// targetOf picks the node running the most members (node2 on a tie), a
// member on it and how many run there.
func targetOf(c *cluster, pods map[string]etcdPod) (*node, string, int) {
	count := map[string][]string{}
	for _, name := range etcdMemberNames {
		count[pods[name].Node] = append(count[pods[name].Node], name)
	}
	target := c.nodes[len(c.nodes)-1]
	for _, n := range c.nodes {
		if len(count[n.name]) > len(count[target.name]) {
			target = n
		}
	}
	return target, count[target.name][0], len(count[target.name])
}

// before reads the cluster as row name starts and writes its key.
func (a *etcdApp) before(name string) etcdBefore {
	t := a.c.t
	t.Helper()
	pods, err := a.pods()
	if err != nil {
		t.Fatal(err)
	}
	members, err := a.client.memberList(etcdClientURL(pods[etcdMemberNames[0]].IP))
	if err != nil {
		t.Fatal(err)
	}
	b := etcdBefore{pods: pods, members: members, key: "/row/" + strings.ReplaceAll(name, " ", "-"), val: fmt.Sprintf("written at %s", time.Now().Format(time.RFC3339Nano))}
	for _, m := range members {
		b.endpoints = append(b.endpoints, m.ClientURLs...)
	}
	if err := a.client.put(b.endpoints[0], b.key, b.val); err != nil {
		t.Fatal(err)
	}
	return b
}

// waitPublished waits until each member's node has published its entry in
// the placement index (the hint a re-created pod gets comes from there).
func (a *etcdApp) waitPublished() {
	t := a.c.t
	t.Helper()
	pods, err := a.pods()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range etcdMemberNames {
		a.c.waitIndexed(a.ns, name, pods[name].Node, name)
	}
}

// observe looks at the cluster every second after a disruption that began
// at start, until the row has settled, and returns the
// last look (the window's), its restarts counted over every look. Settled,
// with stickyip: back as before b, and still so at every look of a window
// that holds etcdWindowLooks looks and lasts until each member, as it then
// runs, has had its kubelet's periodic resync since it was seen running,
// and etcdLooksAfterResync looks after (memberResyncs) — a look in it that
// is not back ends the row, not back. The control: its three pods running,
// and every look of such a window the same (a look that differs starts
// the window again): what host-local leaves does not change by itself (a
// member at a new IP stays listed at its old peer address). Or the row's
// time is up (etcdRowLimit).
func (a *etcdApp) observe(b etcdBefore, start time.Time) etcdRow {
	var row, first etcdRow
	var back time.Duration
	looks := 0       // looks in the window; 0: it has not begun
	afterResync := 0 // looks since every member's resync was seen
	seen := incarnationsOf(b.pods)
	resyncs := memberResyncs{}
	done := func(r etcdRow) etcdRow {
		r.restarted = seen.restarts()
		r.resynced = resyncs.String()
		return r
	}
	for {
		row = a.look(b)
		seen.add(row.pods)
		if a.resynced(resyncs, row.pods) {
			afterResync++
		} else {
			afterResync = 0
		}
		settled := row.ok || (!a.sticky && row.running)
		switch {
		case looks == 0 && settled:
			looks, first, back = 1, row, time.Since(start)
		case looks > 0 && a.sticky && !row.ok:
			row.note = strings.Trim(fmt.Sprintf("back after %s, then not, %s after the disruption; %s", back.Round(100*time.Millisecond),
				time.Since(start).Round(100*time.Millisecond), row.note), "; ")
			row.looks = looks + 1
			return done(row)
		case looks > 0 && !a.sticky && row.String() != first.String():
			looks, first = 1, row
		case looks > 0:
			looks++
		}
		if looks >= etcdWindowLooks && afterResync > etcdLooksAfterResync {
			row.back, row.looks = back, looks
			return done(row)
		}
		if time.Since(start) > etcdRowLimit {
			if row.ok { // back, but too late for a whole window
				row.ok, row.note = false, strings.Trim("back only at the end of the row's time; "+row.note, "; ")
			}
			row.looks = looks
			row.note = strings.Trim(row.note+"; "+resyncs.String(), "; ")
			return done(row)
		}
		time.Sleep(time.Second)
	}
}

// incarnations are the pods (by UID) and containers (by ID) each member
// was seen with: a restart is a pod or container more.
type incarnations map[string]map[string]map[string]bool // member → pod UID → container IDs

func incarnationsOf(pods map[string]etcdPod) incarnations {
	in := incarnations{}
	in.add(pods)
	return in
}

func (in incarnations) add(pods map[string]etcdPod) {
	for name, p := range pods {
		if p.UID == "" {
			continue
		}
		if in[name] == nil {
			in[name] = map[string]map[string]bool{}
		}
		if in[name][p.UID] == nil {
			in[name][p.UID] = map[string]bool{}
		}
		if p.Container != "" {
			in[name][p.UID][p.Container] = true
		}
	}
}

// restarts counts the pods and containers seen beyond each member's first.
func (in incarnations) restarts() int {
	n := 0
	for _, uids := range in {
		c := 0
		for _, containers := range uids {
			c += max(1, len(containers))
		}
		n += c - 1
	}
	return n
}

// memberResync follows one member as it runs (its pod and container) until
// its kubelet has resynced it since it was seen so.
type memberResync struct {
	runs string // pod UID and container ID
	n    *node
	mark int64 // the kubelet's log when the member was seen running so
	pod  kubeletPod
	done bool
	took time.Duration
	at   time.Time
}

type memberResyncs map[string]*memberResync

func (m memberResyncs) String() string {
	var out []string
	for _, name := range etcdMemberNames {
		switch r := m[name]; {
		case r == nil:
			out = append(out, name+" not running")
		case r.done:
			out = append(out, fmt.Sprintf("%s resynced %s after seen running", name, r.took.Round(100*time.Millisecond)))
		default:
			out = append(out, name+" not resynced yet")
		}
	}
	return "kubelet " + strings.Join(out, ", ")
}

// resynced follows each member in pods (memberResync) and reports whether
// every one has been resynced as it runs now.
func (a *etcdApp) resynced(m memberResyncs, pods map[string]etcdPod) bool {
	all := true
	for _, name := range etcdMemberNames {
		p, ok := pods[name]
		if !ok || p.Node == "" || p.Container == "" || !p.Running {
			delete(m, name)
			all = false
			continue
		}
		runs := p.UID + " " + p.Container
		r := m[name]
		if r == nil || r.runs != runs || r.n.name != p.Node {
			n := a.c.node(p.Node)
			r = &memberResync{runs: runs, n: n, mark: n.kubeletLogMark(), pod: kubeletPod{ref: a.ns + "/" + name, uid: p.UID}, at: time.Now()}
			m[name] = r
		}
		if !r.done && r.n.kubeletResynced(r.mark, []kubeletPod{r.pod})[r.pod] {
			r.done, r.took = true, time.Since(r.at)
		}
		all = all && r.done
	}
	return all
}

// look is one look at the cluster against b: the pods' IPs, and, asked
// at once of every address a client may know (b's endpoints, then the
// pods' current ones), the health of b's endpoints, the member list and
// b's key.
func (a *etcdApp) look(b etcdBefore) etcdRow {
	row := etcdRow{list: "not read", key: "not read"}
	pods, err := a.pods()
	if err != nil {
		row.note = err.Error()
		return row
	}
	row.pods = pods
	row.podsAgainst(b.pods, pods)
	row.running = allRunning(pods)
	endpoints := slices.Clone(b.endpoints)
	for _, name := range etcdMemberNames {
		if ip := pods[name].IP; ip != "" && !slices.Contains(endpoints, etcdClientURL(ip)) {
			endpoints = append(endpoints, etcdClientURL(ip))
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, err := range a.client.healthAll(b.endpoints) {
			if err == nil {
				row.healthy++
			}
		}
	})
	wg.Go(func() { row.list = a.listAgainst(b.members, endpoints, pods) })
	wg.Go(func() { row.key = a.keyAgainst(b.key, b.val, endpoints) })
	wg.Wait()
	row.ok = len(pods) == etcdReplicas && row.kept == etcdReplicas && row.list == "unchanged" &&
		row.healthy == len(b.endpoints) && row.key == "read"
	if row.ok {
		row.ok, row.note = a.runtimeAgrees(pods)
	}
	return row
}

// podsAgainst fills the row's pod columns: members restarted (a new pod
// or container), IPs kept, moves, the node terms of the new pods.
func (row *etcdRow) podsAgainst(before, pods map[string]etcdPod) {
	var placements []string
	for _, name := range etcdMemberNames {
		was, now := before[name], pods[name]
		if now.UID != was.UID || now.Container != was.Container {
			row.restarted++
			if now.UID != was.UID {
				placements = append(placements, now.Placement)
			}
		}
		if now.IP != "" && now.IP == was.IP {
			row.kept++
		}
		if now.Node != "" && now.Node != was.Node {
			row.moved = append(row.moved, fmt.Sprintf("%s %s→%s", name, was.Node, now.Node))
		}
	}
	row.placement = strings.Join(slices.Compact(slices.Sorted(slices.Values(placements))), ", ")
}

// listAgainst reads the member list through the first of endpoints that
// answers and describes it against before (describeList); when none
// answers `member list`, a member's own view (serializable) is described,
// marked so, or "not read".
func (a *etcdApp) listAgainst(before []etcdMember, endpoints []string, pods map[string]etcdPod) string {
	var lin, ser []etcdMember
	var linErr, serErr error
	var serFrom string
	var wg sync.WaitGroup
	wg.Go(func() {
		lin, _, linErr = eachEndpoint(endpoints, func(ep string) ([]etcdMember, error) { return a.client.members(ep, true) })
	})
	wg.Go(func() {
		ser, serFrom, serErr = eachEndpoint(endpoints, func(ep string) ([]etcdMember, error) { return a.client.members(ep, false) })
	})
	wg.Wait()
	switch {
	case linErr == nil:
		return describeList(before, lin, pods)
	case serErr == nil:
		return "not read; " + urlHost(serFrom) + "'s own view: " + describeList(before, ser, pods)
	}
	return "not read"
}

// keyAgainst reads key through the first of endpoints that answers:
// "read" when it holds val, else what it holds, or "not read".
func (a *etcdApp) keyAgainst(key, val string, endpoints []string) string {
	type kv struct {
		v     string
		found bool
	}
	got, _, err := eachEndpoint(endpoints, func(ep string) (kv, error) {
		v, found, err := a.client.get(ep, key)
		return kv{v, found}, err
	})
	switch {
	case err != nil:
		return "not read"
	case !got.found:
		return "missing"
	case got.v != val:
		return fmt.Sprintf("changed: %q", got.v)
	}
	return "read"
}

// describeList is "unchanged" when members are the members before, else
// what changed, with where each changed member's pod is now.
func describeList(before, after []etcdMember, pods map[string]etcdPod) string {
	if slices.EqualFunc(before, after, func(x, y etcdMember) bool { return x.ID == y.ID && x.String() == y.String() }) {
		return "unchanged"
	}
	var diffs []string
	for _, m := range after {
		i := slices.IndexFunc(before, func(x etcdMember) bool { return x.ID == m.ID })
		if i >= 0 && before[i].String() == m.String() {
			continue
		}
		d := m.String()
		if p, ok := pods[m.Name]; ok {
			d += " (its pod at " + p.IP + ")"
		}
		diffs = append(diffs, d)
	}
	if len(after) != len(before) {
		diffs = append(diffs, fmt.Sprintf("%d members, were %d", len(after), len(before)))
	}
	return strings.Join(diffs, "; ")
}

// runtimeAgrees checks that each member's node runs one ready sandbox for
// its pod, with the IP the API shows.
func (a *etcdApp) runtimeAgrees(pods map[string]etcdPod) (bool, string) {
	for _, p := range pods {
		sbs, err := a.c.node(p.Node).readySandboxes(context.Background(), a.ns, p.Name)
		if err != nil {
			return false, err.Error()
		}
		if len(sbs) != 1 || sbs[0].UID != p.UID || sbs[0].IP != p.IP {
			return false, fmt.Sprintf("%s: API uid %s IP %s; %s's runtime %+v", p.Name, p.UID, p.IP, p.Node, sbs)
		}
	}
	return true, ""
}

// String is the row in one line.
func (r etcdRow) String() string {
	if r.na != "" {
		return "n/a: " + r.na
	}
	back := "not back"
	if r.ok {
		back = "back in " + r.back.Round(100*time.Millisecond).String()
	}
	if r.looks > 0 {
		back += fmt.Sprintf(" (%d looks in the window)", r.looks)
	}
	s := fmt.Sprintf("%s; restarted %d, IP kept %d/%d, moved %v, placement %q; member list %s; health %d/%d; key %s",
		back, r.restarted, r.kept, etcdReplicas, r.moved, r.placement, r.list, r.healthy, etcdReplicas, r.key)
	if r.note != "" {
		s += "; " + r.note
	}
	return s
}

// formatEtcdTable is the table in Markdown, as test/e2e/README.md shows it.
func formatEtcdTable(rows []etcdRow) string {
	var b strings.Builder
	b.WriteString("| disruption | members restarted | IP kept | member list | endpoint health | key written before | back in | how |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.na != "" {
			fmt.Fprintf(&b, "| %s | n/a: %s | | | | | | |\n", r.name, r.na)
			continue
		}
		back := "not back"
		if r.ok {
			back = r.back.Round(100 * time.Millisecond).String()
		}
		var how []string
		if len(r.moved) > 0 {
			how = append(how, "moved "+strings.Join(r.moved, ", "))
		} else if r.restarted > 0 {
			how = append(how, "same nodes")
		}
		if r.placement != "" {
			how = append(how, "new pods' node term: "+r.placement)
		}
		if r.note != "" {
			how = append(how, r.note)
		}
		fmt.Fprintf(&b, "| %s | %d | %d/%d | %s | %d/%d healthy | %s | %s | %s |\n",
			r.name, r.restarted, r.kept, etcdReplicas, r.list, r.healthy, etcdReplicas, r.key, back, strings.Join(how, "; "))
	}
	return b.String()
}

// evict asks the Eviction API to evict member name (no budget stops it).
func (r *etcdRound) evict(name string) {
	t := r.a.c.t
	t.Helper()
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.a.ns}}
	if err := r.a.c.client.CoreV1().Pods(r.a.ns).EvictV1(context.Background(), ev); err != nil {
		t.Fatalf("evict %s/%s: %v", r.a.ns, name, err)
	}
}

// drain is `kubectl drain` of the target node (cordon, then the Eviction
// API for its pods, kube-flannel's DaemonSet pod left), then, once every
// evicted member's replacement is scheduled or drainHold has passed,
// `kubectl uncordon`. The note says where the replacements were meanwhile;
// one that carries a required term and was scheduled while the node was
// cordoned fails the test.
func (r *etcdRound) drain() {
	c := r.a.c
	t := c.t
	t.Helper()
	const drainHold = 10 * time.Second
	before, err := r.a.pods()
	if err != nil {
		t.Fatal(err)
	}
	var evicted []string
	for _, name := range etcdMemberNames {
		if before[name].Node == r.target.name {
			evicted = append(evicted, name)
		}
	}
	if out, err := c.kubectlErr("drain", r.target.name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m"); err != nil {
		c.kubectl("uncordon", r.target.name)
		t.Fatalf("kubectl drain %s: %v\n%s", r.target.name, err, out)
	}
	drained := time.Now()
	var where []string
	for scheduled := false; !scheduled && time.Since(drained) < drainHold; time.Sleep(500 * time.Millisecond) {
		scheduled, where = r.a.whereNow(evicted, r.target.name)
	}
	r.note = fmt.Sprintf("%s cordoned %s: %s", r.target.name, time.Since(drained).Round(100*time.Millisecond), strings.Join(where, ", "))
	c.kubectl("uncordon", r.target.name)
}

// whereNow says where the replacements of members names are, and whether
// each is scheduled; one that carries a required term and is scheduled
// while cordoned (its node) is, fails the test.
func (a *etcdApp) whereNow(names []string, cordoned string) (bool, []string) {
	t := a.c.t
	t.Helper()
	pods, err := a.pods()
	if err != nil {
		t.Fatal(err)
	}
	all := true
	var where []string
	for _, name := range names {
		p, ok := pods[name]
		switch {
		case !ok:
			all, where = false, append(where, name+" not re-created")
		case p.Node == "":
			all, where = false, append(where, fmt.Sprintf("%s Pending (%s)", name, p.Placement))
		default:
			where = append(where, fmt.Sprintf("%s on %s (%s)", name, p.Node, p.Placement))
			if strings.HasPrefix(p.Placement, "required") {
				t.Errorf("%s, placement %s, scheduled on %s while %s was cordoned", name, p.Placement, p.Node, cordoned)
			}
		}
	}
	return all, where
}

// reboot cuts the target node's power and boots it with the API server up
// (node.powerOff, node.powerOn: its pods' sandboxes die with it, no CNI
// DEL), and waits until the Node is Ready.
func (r *etcdRound) reboot() {
	r.target.powerOff()
	r.target.powerOn()
	r.target.waitKubeletHealthy()
	r.target.waitReady()
}

// waitKubeletHealthy waits until the node's kubelet answers its /healthz
// (it has reached its runtime), failing if it exits.
func (n *node) waitKubeletHealthy() {
	t := n.t
	t.Helper()
	hc := n.httpClient()
	eventually(t, n.name+"'s kubelet /healthz", 2*time.Minute, 500*time.Millisecond, func() (bool, string) {
		if err := n.kubelet.exited(); err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get("http://127.0.0.1:10248/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// ballast binds a pod requesting steerCPU to the target node, so that the
// scheduler's own scoring prefers the other node, then deletes the victim;
// the ballast is removed after the row's look.
func (r *etcdRound) ballast() {
	c := r.a.c
	steer := c.steerPod(r.a.ns, r.target.name)
	c.deletePod(r.a.ns, r.victim)
	r.note = fmt.Sprintf("%s (%s CPU) bound to %s", steer, steerCPU, r.target.name)
	r.after = func() { c.remove(r.a.ns, "pod", steer) }
}
