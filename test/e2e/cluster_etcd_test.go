//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// etcdNamespace is where the disruption table's etcd runs.
const etcdNamespace = "etcd"

// etcdSticky is issue 32's disruption table with stickyip (a step of
// TestCluster, on nodes running the plugin and checkpointd since the
// stickyip step): deploy/placement applied (the placement step applies it
// again: unchanged), the etcd StatefulSet, its pod template without any
// stickyip annotation, in a namespace labelled with the opt-in
// (stickyip.io/statefulsets: 10m-required, issue 39), founded by IP
// (newEtcdApp, found, once), every row of etcdDisruptions on the cluster the row before
// left, each asserted over a window past the kubelets' next sync: the
// disruption happened (its members restarted, its component a new
// process), the members keep their IPs, the member list is unchanged,
// every endpoint is healthy and the key written before is read; a
// re-created member carries the required node affinity (a drained node's
// stays Pending while it is cordoned). Then the StatefulSet, the
// members' data and their reservations go (`stickyip release` on each
// node, as an operator frees them), so that the later steps find no entry
// of theirs in the placement index. Last, the control of the opt-in: the
// same manifest in a namespace without the label (etcdUnlabelled).
func (c *cluster) etcdSticky() {
	t := c.t
	for _, n := range c.nodes {
		if conf, err := n.conflist(); err != nil || !strings.Contains(conf, `"type": "stickyip"`) {
			t.Fatalf("%s: the conflist does not name stickyip (%v):\n%s", n.name, err, conf)
		}
	}
	c.applyPlacement()
	c.ensurePlacementController() // it alone writes the index the table waits for
	a := c.newEtcdApp(etcdNamespace, true)
	a.optIn(etcdOptInLabel)
	a.table()
	a.remove()
	c.kubectl("delete", "namespace", etcdNamespace, "--wait=true", "--timeout=2m")
	a.unlabelled()
}

// release releases the members' reservations on every node and waits
// until no entry of the namespace is left in any node's record.
func (a *etcdApp) release() {
	c := a.c
	for _, n := range c.nodes {
		for _, name := range etcdMemberNames {
			n.stickyipRelease(a.ns + "/" + name)
		}
	}
	eventually(c.t, "no entry of "+a.ns+" left in the nodes' records", time.Minute, time.Second, func() (bool, string) {
		for _, n := range c.nodes {
			for key := range c.entriesOf(n.name) {
				if strings.HasPrefix(key, a.ns+"/") {
					return false, fmt.Sprintf("%s holds %s", n.name, key)
				}
			}
		}
		return true, ""
	})
}

// etcdControl is the same table on host-local, the control (the last
// step of TestClusterInstall, on the nodes the uninstall leaves: flannel's
// own conflist, whose flannel plugin delegates to host-local; no plugin,
// no checkpointd, no placement). Each row is asserted to show what
// test/e2e/README.md says host-local costs (etcdDisruption: every restarted member
// at another IP; the quorum lost on delete-all and drain; the restarts that
// leave the sandboxes alone free), and to have disrupted as it says; after
// each, the cluster is repaired or founded anew as an operator would (the
// row says which).
func (c *cluster) etcdControl() {
	t := c.t
	want := c.kubeFlannelConfig()["cni-conf.json"]
	for _, n := range c.nodes {
		conf, err := n.conflist()
		if err != nil || conf != want || !onHostLocal(conf) {
			t.Fatalf("%s: the conflist is not flannel's own on host-local (%v):\n%s\nkube-flannel's cni-conf.json:\n%s", n.name, err, conf, want)
		}
	}
	a := c.newEtcdApp(etcdNamespace, false)
	a.table()
	a.remove()
	c.kubectl("delete", "namespace", etcdNamespace, "--wait=true", "--timeout=2m")
}

// onHostLocal reports whether conflist is a flannel one whose plugin
// delegates to host-local (names no IPAM, or host-local) and names
// stickyip nowhere.
func onHostLocal(conflist string) bool {
	var conf struct {
		Plugins []struct {
			Type string
			IPAM *struct{ Type string }
		}
	}
	if err := json.Unmarshal([]byte(conflist), &conf); err != nil || len(conf.Plugins) == 0 || strings.Contains(conflist, "stickyip") {
		return false
	}
	f := conf.Plugins[0]
	return f.Type == "flannel" && (f.IPAM == nil || f.IPAM.Type == "host-local")
}

// stickyipRelease runs `stickyip release NAMESPACE/NAME` on the node (its
// mount namespace: the default paths are the node's own). A node that
// records nothing for id answers so, exit 1.
func (n *node) stickyipRelease(id string) {
	t := n.t
	t.Helper()
	out, err := exec.Command("nsenter", "--mount="+n.mnt.Path, "--net="+n.ns.Path,
		filepath.Join(n.bins.project, "stickyip"), "release", id).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 && strings.HasPrefix(string(out), "nothing recorded for "+id) {
		err = nil
	}
	if err != nil {
		t.Fatalf("%s: stickyip release %s: %v\n%s", n.name, id, err, out)
	}
	t.Logf("%s: stickyip release %s: %s", n.name, id, strings.TrimSpace(string(out)))
}
