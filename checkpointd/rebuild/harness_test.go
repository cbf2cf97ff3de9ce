package rebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/checkpointd/metrics"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// node is a node for the rebuilder: a real store on disk with a CNI config
// (network net1, 10.9.0.0/24), a fake runtime, a result cache directory,
// network namespaces, checkpoints and an API server the test controls.
type node struct {
	t        *testing.T
	dir      string
	store    *ipamstore.Store
	env      ipam.Env
	now      time.Time
	rt       *fakeRuntime
	cacheDir string
	netns    map[string]map[string][]netip.Addr // path -> ifname -> addresses
	gone     map[string]bool                    // namespace paths that are gone
	ckpts    []*checkpoint.Record
	index    *fakeIndex
	api      *fakeAPI
	events   *fakeNode
	m        *metrics.Metrics
	b        *Rebuilder
}

const conflist = `{"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"bridge","ipam":{"type":"stickyip","dataDir":%q,"hostLocalDataDir":"",
"ranges":[[{"subnet":"10.9.0.0/24"}]]}}]}`

func newNode(t *testing.T, enabled bool) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{t: t, dir: filepath.Join(root, "stickyip"), now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC),
		rt: &fakeRuntime{status: map[string]cri.Status{}, statusErr: map[string]error{}}, cacheDir: filepath.Join(root, "results"),
		netns: map[string]map[string][]netip.Addr{}, gone: map[string]bool{}, index: &fakeIndex{}, api: &fakeAPI{up: true},
		events: &fakeNode{}, m: metrics.New()}
	confDir := filepath.Join(root, "net.d")
	must(t, os.MkdirAll(confDir, 0o755))
	must(t, os.WriteFile(filepath.Join(confDir, "10-net1.conflist"), fmt.Appendf(nil, conflist, n.dir), 0o644))
	n.env = ipam.Env{Now: func() time.Time { return n.now }, BootID: "boot-2",
		BootTime:    func() time.Time { return time.Date(2026, 11, 27, 11, 0, 0, 0, time.UTC) },
		SandboxGone: func(p string) bool { return n.gone[p] }}
	n.store = ipamstore.NewWithEnv(n.dir, 2*time.Second, n.env).WithCNIConfDir(confDir)
	n.b = New(Config{Enabled: enabled, Store: n.store, Runtime: n.rt, ResultsDir: n.cacheDir,
		Checkpoints: func() ([]*checkpoint.Record, error) { return n.ckpts, nil }, Index: n.index, API: n.api, Node: n.events,
		Metrics: n.m, Now: func() time.Time { return n.now },
		NetnsAddrs: func(p string) (map[string][]netip.Addr, error) {
			if a, ok := n.netns[p]; ok {
				return a, nil
			}
			return nil, fmt.Errorf("%s: no such namespace", p)
		}})
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// engine returns the network's engine, as the plugin builds it.
func (n *node) engine() *ipam.Engine {
	n.t.Helper()
	e, err := ipam.NetworkEngine(filepath.Join(filepath.Dir(n.dir), "net.d"), "net1", n.dir, n.env)
	must(n.t, err)
	return e
}

// add runs a pod's ADD as the plugin does, returning its address.
func (n *node) add(cid, ns, name string, keep time.Duration) (string, error) {
	n.t.Helper()
	return n.addWaiting(cid, ns, name, keep, 0)
}

// addWaiting is add on a network configured with ipam.newStoreWait wait.
func (n *node) addWaiting(cid, ns, name string, keep, wait time.Duration) (string, error) {
	n.t.Helper()
	req := ipam.AddRequest{ContainerID: cid, IfName: "eth0", Netns: "/run/netns/" + cid, UID: "uid-" + name, PodName: name,
		Identity: reservation.Identity{Namespace: ns, Name: name, IfName: "eth0"}, Duration: keep}
	var recs []*reservation.Record
	err := boltstore.New(n.dir, time.Second).WithNewStoreWait(wait).Update("net1", func(tx reservation.Txn) (err error) {
		recs, err = n.engine().Add(tx, req)
		return err
	})
	if err != nil {
		return "", err
	}
	return recs[0].IP.String(), nil
}

func (n *node) del(cid string) {
	n.t.Helper()
	must(n.t, n.delErr(cid))
}

// delErr runs a sandbox's DEL as the plugin does.
func (n *node) delErr(cid string) error {
	return boltstore.New(n.dir, time.Second).Update("net1", func(tx reservation.Txn) error { return n.engine().Del(tx, cid, "eth0") })
}

// running makes a pod's sandbox run with ip: the runtime lists it, its
// namespace holds the address and (withCache) its CNI result is cached.
func (n *node) running(cid, ns, name, ip string, ann map[string]string, withCache bool) {
	n.rt.sandboxes = append(n.rt.sandboxes, cri.Sandbox{ID: cid, Namespace: ns, Name: name, UID: "uid-" + name, Ready: true,
		CreatedAt: n.now.Add(-30 * time.Minute), Annotations: ann})
	path := "/run/netns/" + cid
	n.rt.status[cid] = cri.Status{IPs: []netip.Addr{netip.MustParseAddr(ip)}, Annotations: ann, Netns: path}
	n.netns[path] = map[string][]netip.Addr{"eth0": {netip.MustParseAddr(ip)}, "lo": nil}
	if withCache {
		n.cache(cid, ns, name, ip, ann, path)
	}
}

// stop makes sandbox cid stop, as the runtime does on StopPodSandbox (its
// DEL is the caller's: del).
func (n *node) stop(cid string) {
	for i := range n.rt.sandboxes {
		if n.rt.sandboxes[i].ID == cid {
			n.rt.sandboxes[i].Ready = false
		}
	}
}

// requireDistinct fails unless every address the runtime's ready sandboxes
// hold is held by one of them only, and the store has it allocated to that
// very sandbox: no address handed out twice, none free or reserved for
// another while a sandbox runs with it.
func (n *node) requireDistinct() {
	n.t.Helper()
	holder := map[string]string{}
	for _, sb := range n.rt.sandboxes {
		if !sb.Ready {
			continue
		}
		for _, ip := range n.rt.status[sb.ID].IPs {
			if other, ok := holder[ip.String()]; ok {
				n.t.Fatalf("%s is held by two ready sandboxes, %s and %s", ip, other, sb.ID)
			}
			holder[ip.String()] = sb.ID
		}
	}
	got := n.entries()
	for ip, cid := range holder {
		if e := got[ip]; e.State != reservation.Allocated || e.ContainerID != cid {
			n.t.Fatalf("%s, which ready sandbox %s holds, is in the store as %+v", ip, cid, e)
		}
	}
}

// cache writes the CNI result of an ADD, as libcni does.
func (n *node) cache(cid, ns, name, ip string, ann map[string]string, netns string) {
	n.t.Helper()
	f := map[string]any{"kind": "cniCacheV1", "containerId": cid, "ifName": "eth0", "networkName": "net1", "netns": netns,
		"cniArgs":        [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", ns}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", "uid-" + name}},
		"capabilityArgs": map[string]any{"io.kubernetes.cri.pod-annotations": ann},
		"result":         map[string]any{"cniVersion": "1.0.0", "ips": []any{map[string]any{"address": ip + "/24"}}}}
	b, err := json.Marshal(f)
	must(n.t, err)
	must(n.t, os.MkdirAll(n.cacheDir, 0o700))
	p := filepath.Join(n.cacheDir, "net1-"+cid+"-eth0")
	must(n.t, os.WriteFile(p, b, 0o600))
	must(n.t, os.Chtimes(p, n.now.Add(-30*time.Minute), n.now.Add(-30*time.Minute)))
}

// damage overwrites the first 32 KiB of the store.
func (n *node) damage() []byte {
	n.t.Helper()
	f, err := os.OpenFile(filepath.Join(n.dir, boltstore.DBFile), os.O_WRONLY, 0)
	must(n.t, err)
	junk := []byte(strings.Repeat("damaged!", 4096))
	_, err = f.WriteAt(junk, 0)
	must(n.t, err)
	must(n.t, f.Close())
	b, err := os.ReadFile(filepath.Join(n.dir, boltstore.DBFile))
	must(n.t, err)
	return b
}

func (n *node) entries() map[string]reservation.Entry {
	n.t.Helper()
	all, err := n.store.Entries()
	must(n.t, err)
	out := map[string]reservation.Entry{}
	for _, e := range all {
		out[e.IP.String()] = e
	}
	return out
}

// check runs the store's own checks (stickyip check).
func (n *node) check() {
	n.t.Helper()
	problems, err := boltstore.New(n.dir, time.Second).Check()
	if err != nil || len(problems) > 0 {
		n.t.Fatalf("stickyip check: %v %v", err, problems)
	}
}

func checkpointOf(ns, name string, ann map[string]string, ips ...string) *checkpoint.Record {
	return &checkpoint.Record{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: ann}}, IPs: ips}
}

var sticky30 = map[string]string{contract.AnnotationReservedDuration: "30"}

type fakeRuntime struct {
	sandboxes []cri.Sandbox
	listErr   error
	status    map[string]cri.Status
	statusErr map[string]error
	// listed, when set, runs once the runtime has answered a list: what
	// happens on the node while a rebuild reads its sources.
	listed func()
}

func (f *fakeRuntime) Sandboxes(context.Context) ([]cri.Sandbox, error) {
	out := slices.Clone(f.sandboxes)
	if f.listed != nil {
		f.listed()
	}
	return out, f.listErr
}

func (f *fakeRuntime) Status(_ context.Context, id string) (cri.Status, error) {
	return f.status[id], f.statusErr[id]
}

type fakeIndex struct {
	entries []IndexEntry
	err     error
	reads   int
	node    *corev1.Node // the Node the last read was given
}

func (f *fakeIndex) ReadOwn(_ context.Context, node *corev1.Node) ([]IndexEntry, error) {
	f.reads++
	f.node = node
	return f.entries, f.err
}

type fakeAPI struct{ up bool }

func (f *fakeAPI) Reachable() (bool, time.Time) { return f.up, time.Time{} }

// fakeNode is the node's Node as the watch shows it: node1 by default,
// node when set, none while unknown.
type fakeNode struct {
	events  []string
	node    *corev1.Node
	unknown bool
}

func (f *fakeNode) Node() (*corev1.Node, bool) {
	switch {
	case f.unknown:
		return nil, false
	case f.node != nil:
		return f.node, true
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, true
}

func (f *fakeNode) NodeEvent(_ *corev1.Node, kind, reason, msg string) {
	f.events = append(f.events, kind+" "+reason+": "+msg)
}

var errAway = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
