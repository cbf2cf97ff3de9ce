//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The etcd cluster's membership, by pod IP: founded once the pods run;
// on host-local (the control), repaired after each row as an operator
// would when members came back at new IPs (restore).

// found creates the StatefulSet and founds the cluster by IP: once the
// three pods run (each entrypoint waiting for its join file), each gets the
// same --initial-cluster naming every member at its pod IP (state new, a
// token per founding). It waits until the three members are listed at
// their pod IPs and healthy.
func (a *etcdApp) found() {
	t := a.c.t
	t.Helper()
	start := time.Now()
	a.foundings++
	a.token = fmt.Sprintf("%s-%d", a.ns, a.foundings)
	if _, err := a.c.client.AppsV1().StatefulSets(a.ns).Create(context.Background(), etcdStatefulSet(a.ns, a.annotations), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := a.waitPods(3 * time.Minute)
	initial := map[string]string{}
	for _, name := range etcdMemberNames {
		initial[name] = etcdPeerURL(pods[name].IP)
	}
	for _, name := range etcdMemberNames {
		a.writeJoin(pods[name], initial, "new")
	}
	a.waitAsFounded(2 * time.Minute)
	var where []string
	for _, name := range etcdMemberNames {
		where = append(where, fmt.Sprintf("%s %s on %s", name, pods[name].IP, pods[name].Node))
	}
	t.Logf("etcd in %s founded by IP (token %s) in %s: %s", a.ns, a.token, time.Since(start).Round(100*time.Millisecond), strings.Join(where, ", "))
}

// writeJoin writes pod p's join file on its node (a rename, so the
// entrypoint never reads half of it): the initial cluster (name → peer
// URL), its state ("new" or "existing") and the founding's token.
func (a *etcdApp) writeJoin(p etcdPod, initial map[string]string, state string) {
	t := a.c.t
	t.Helper()
	var urls []string
	for name, u := range initial {
		urls = append(urls, name+"="+u)
	}
	sort.Strings(urls)
	text := fmt.Sprintf("--initial-cluster=%s\n--initial-cluster-state=%s\n--initial-cluster-token=%s\n", strings.Join(urls, ","), state, a.token)
	dir := filepath.Join(a.c.node(p.Node).etcdDir(), p.Name) // the pod's subPathExpr, made by the kubelet
	writeFile(t, filepath.Join(dir, "join.tmp"), []byte(text), 0o644)
	if err := os.Rename(filepath.Join(dir, "join.tmp"), filepath.Join(dir, "join")); err != nil {
		t.Fatal(err)
	}
}

// waitAsFounded waits until the cluster is as founded (asFounded).
func (a *etcdApp) waitAsFounded(timeout time.Duration) {
	a.c.t.Helper()
	eventually(a.c.t, "etcd members listed at their pod IPs and healthy", timeout, 250*time.Millisecond, a.asFounded)
}

// asFounded reports whether the cluster is as found leaves it: three pods
// running, listed (peer and client URL) at their pod IPs, each healthy.
func (a *etcdApp) asFounded() (bool, string) {
	pods, err := a.pods()
	if err != nil {
		return false, err.Error()
	}
	if !allRunning(pods) {
		return false, fmt.Sprint(pods)
	}
	members, err := a.client.memberList(etcdClientURL(pods[etcdMemberNames[0]].IP))
	if err != nil {
		return false, err.Error()
	}
	if len(members) != etcdReplicas {
		return false, fmt.Sprintf("%d members listed: %v", len(members), members)
	}
	for i, m := range members {
		ip := pods[etcdMemberNames[i]].IP
		if m.Name != etcdMemberNames[i] || !slices.Equal(m.PeerURLs, []string{etcdPeerURL(ip)}) || !slices.Equal(m.ClientURLs, []string{etcdClientURL(ip)}) {
			return false, fmt.Sprintf("member %s, want %s at %s", m, etcdMemberNames[i], ip)
		}
	}
	for _, name := range etcdMemberNames {
		if err := a.client.health(etcdClientURL(pods[name].IP)); err != nil {
			return false, err.Error()
		}
	}
	return true, ""
}

// restore leaves the control's cluster as founded again after a row, as
// an operator would, and says how (for the row's note): "" when it is;
// else repaired (repair); else, when nothing answers `member list` (the
// quorum lost), founded anew: the StatefulSet deleted, the members' data
// removed from the nodes, so that the scheduler places the new members
// afresh, then found. Never with stickyip: there a row must leave the
// cluster as founded.
func (a *etcdApp) restore() string {
	t := a.c.t
	t.Helper()
	if a.sticky {
		t.Fatal("etcd: restore is the control's: with stickyip nothing repairs the cluster between rows")
	}
	if ok, _ := a.asFounded(); ok {
		return ""
	}
	if how, ok := a.repair(); ok {
		return "then repaired as an operator would: " + how
	}
	a.remove()
	a.found()
	return "then founded anew (nothing to repair from)"
}

// repair does what an operator does for members that came back at new
// IPs, through a member that answers `member list`: `member update` of
// the peer URL when the member's data is on its pod's node; `member
// remove` and `member add` when it is not (the pod moved: its data is on
// the other node, which it is removed from), the new member then joining
// from scratch. It says what it did, and whether the cluster is then as
// founded.
func (a *etcdApp) repair() (string, bool) {
	t := a.c.t
	pods, err := a.pods()
	if err != nil || !allRunning(pods) {
		return "", false
	}
	var endpoints []string
	for _, name := range etcdMemberNames {
		endpoints = append(endpoints, etcdClientURL(pods[name].IP))
	}
	members, from, err := eachEndpoint(endpoints, a.client.memberList)
	if err != nil || len(members) != etcdReplicas {
		return "", false
	}
	var done []string
	for _, m := range members {
		p, ok := pods[m.Name]
		if !ok {
			return "", false
		}
		if slices.Equal(m.PeerURLs, []string{etcdPeerURL(p.IP)}) {
			continue
		}
		how, err := a.repairMember(from, m, p)
		if err != nil {
			t.Logf("etcd repair of %s: %v", m.Name, err)
			return "", false
		}
		done = append(done, how)
	}
	if len(done) == 0 {
		return "", false
	}
	start := time.Now()
	for time.Since(start) < 30*time.Second {
		if ok, _ := a.asFounded(); ok {
			t.Logf("etcd repaired as an operator would (%s): as founded %s later", strings.Join(done, "; "), time.Since(start).Round(100*time.Millisecond))
			return strings.Join(done, "; "), true
		}
		time.Sleep(500 * time.Millisecond)
	}
	return "", false
}

// repairMember points member m, whose pod p runs at another IP, at it
// (through endpoint from) and says how.
func (a *etcdApp) repairMember(from string, m etcdMember, p etcdPod) (string, error) {
	if _, err := os.Stat(filepath.Join(a.c.node(p.Node).etcdDir(), p.Name, "data", "member")); err == nil {
		return "member update " + m.Name + " → " + p.IP, a.client.memberUpdate(from, m.ID, etcdPeerURL(p.IP))
	}
	if err := a.client.memberRemove(from, m.ID); err != nil {
		return "", err
	}
	for _, n := range a.c.nodes {
		if n.name != p.Node {
			if err := os.RemoveAll(filepath.Join(n.etcdDir(), p.Name)); err != nil {
				return "", err
			}
		}
	}
	members, err := a.client.memberAdd(from, etcdPeerURL(p.IP))
	if err != nil {
		return "", err
	}
	initial := map[string]string{p.Name: etcdPeerURL(p.IP)}
	for _, o := range members {
		if o.Name != "" { // started: the new one has no name yet
			initial[o.Name] = o.PeerURLs[0]
		}
	}
	a.writeJoin(p, initial, "existing")
	return "member remove " + m.Name + ", member add " + p.IP + " (its data was on another node)", nil
}
