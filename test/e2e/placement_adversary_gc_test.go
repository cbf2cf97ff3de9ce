//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickyip/stickyip/checkpointd/placement"
)

// What the garbage collector did, as the API server's audit log has it
// (controlPlane.auditPolicy logs the collector's writes of ConfigMaps with
// their body and answer): the positive control of every step of the
// adversary that relies on the collector.

// gcWrite is one write of the garbage collector to a ConfigMap.
type gcWrite struct {
	Verb string
	Code int
	Body string // the patch, for a patch
	At   time.Time
}

// removes reports whether w is a patch removing the references with uid.
func (w gcWrite) removes(uid types.UID) bool {
	return w.Verb == "patch" && strings.Contains(w.Body, `"uid":"`+string(uid)+`"`) && strings.Contains(w.Body, `"$patch":"delete"`)
}

// gcWrites returns the garbage collector's writes of ConfigMap ns/name the
// API server answered at or after from.
func (cp *controlPlane) gcWrites(ns, name string, from time.Time) []gcWrite {
	cp.t.Helper()
	f, err := os.Open(cp.auditLogPath())
	if err != nil {
		cp.t.Fatal(err)
	}
	defer f.Close()
	var out []gcWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var ev struct {
			Verb  string `json:"verb"`
			Stage string `json:"stage"`
			User  struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource, Namespace, Name string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			RequestObject json.RawMessage `json:"requestObject"`
			At            time.Time       `json:"stageTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Stage != "ResponseComplete" || ev.ObjectRef.Resource != "configmaps" ||
			ev.ObjectRef.Namespace != ns || ev.ObjectRef.Name != name || ev.At.Before(from) ||
			!slices.Contains([]string{"system:serviceaccount:kube-system:generic-garbage-collector", controllerManagerUser}, ev.User.Username) {
			continue
		}
		out = append(out, gcWrite{Verb: ev.Verb, Code: ev.ResponseStatus.Code, Body: string(ev.RequestObject), At: ev.At})
	}
	return out
}

// collected waits until the garbage collector has removed, from shard
// ns/name, every reference with one of uids, by a write the API server let
// (its audit log), and no reference with those UIDs is left; it fails the
// test if the collector was refused any write of the shard since from. It
// returns how long after from the collector's write was let.
func (a *adversary) collected(ns, name string, from time.Time, what string, uids ...types.UID) time.Duration {
	a.t.Helper()
	var took time.Duration
	eventually(a.t, what+": the garbage collector's answer (audit log)", time.Minute, 100*time.Millisecond, func() (bool, string) {
		ws := a.cp.gcWrites(ns, name, from)
		for _, w := range ws {
			if w.Code >= 300 {
				a.t.Fatalf("%s: the garbage collector's %s of %s/%s was answered %d: %s", what, w.Verb, ns, name, w.Code, w.Body)
			}
		}
		s := a.cp.shard(ns, name)
		for _, uid := range uids {
			i := slices.IndexFunc(ws, func(w gcWrite) bool { return w.removes(uid) || w.Verb == "delete" })
			if i < 0 {
				return false, fmt.Sprintf("no write of the collector removing %s yet (%d writes)", uid, len(ws))
			}
			took = max(took, ws[i].At.Sub(from))
			if s.Exists && slices.ContainsFunc(s.Refs, func(r metav1.OwnerReference) bool { return r.UID == uid }) {
				return false, fmt.Sprintf("the collector removed %s, yet a reference with it is there", uid)
			}
		}
		return true, ""
	})
	return took
}

// spawn registers Node name (again: a new UID) with pods bound to it in
// the shards given of namespace ns, and has it claim each through its own
// credentials: a node that owns those shards, for deleteNode.
func (a *adversary) spawn(ns, name string, shards ...string) *indexWriter {
	a.t.Helper()
	ctx := context.Background()
	nd, err := a.cp.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	a.uids[name] = nd.UID
	a.spawned++
	w := a.cp.indexWriterFor(name)
	for _, shard := range shards {
		pod := podInShard(fmt.Sprintf("g%d", a.spawned), shard)
		p := testPod(pod, nil)
		p.Namespace, p.Spec.NodeName = ns, name
		if _, err := a.cp.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			a.t.Fatal(err)
		}
		l := entryLine(pod, pod, "10.244.8.8")
		l.Since = advT0
		if err := w.claim(ns, l); err != nil {
			a.t.Fatalf("%s claiming its pod %s: %v", name, pod, err)
		}
	}
	return w
}

// podInShard is the first name prefix-<i> in shard.
func podInShard(prefix, shard string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); placement.ShardOf(id) == shard {
			return id
		}
	}
}

// deleteNode deletes Node name with policy and requires, within a minute:
// the Node gone (no finalizer left waiting), its reference and its key gone
// from every shard of ns that had one, each by a write of the garbage
// collector the API server let (or the shard deleted with its last owner).
func (a *adversary) deleteNode(ns, name string, policy metav1.DeletionPropagation) {
	a.t.Helper()
	ctx := context.Background()
	uid := a.uids[name]
	var held []string
	for key, s := range a.cp.shardsIn(ns) {
		if slices.ContainsFunc(s.Refs, func(r metav1.OwnerReference) bool { return r.UID == uid }) {
			held = append(held, strings.TrimPrefix(key, ns+"/"))
		}
	}
	if len(held) == 0 {
		a.t.Fatalf("%s owns no shard of %s: nothing to show", name, ns)
	}
	from := time.Now()
	if err := a.cp.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		a.t.Fatal(err)
	}
	var took time.Duration
	for _, shard := range held {
		took = max(took, a.collected(ns, shard, from, fmt.Sprintf("Node %s deleted (%s)", name, policy), uid))
		if s := a.cp.shard(ns, shard); s.Values[name] != "" {
			a.t.Fatalf("Node %s deleted (%s): its key is still in %s/%s: %q", name, policy, ns, shard, s.Values[name])
		}
	}
	eventually(a.t, "Node "+name+" gone", time.Minute, 100*time.Millisecond, func() (bool, string) {
		nd, err := a.cp.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("finalizers %v (%v)", nd.GetFinalizers(), err)
	})
	a.t.Logf("Node %s deleted (%s): its reference and entries out of %d shards %v after %v, the Node gone after %v",
		name, policy, len(held), held, took.Round(time.Millisecond), time.Since(from).Round(time.Millisecond))
	a.deletions++
}

// hammer runs write in n goroutines, each as fast as the API server
// answers, until the returned stop is called; stop returns how many writes
// were made and how many the API server took.
func hammer(n int, write func(i int) error) (stop func() (tried, took int64)) {
	var tried, took int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				atomic.AddInt64(&tried, 1)
				if write(g*1_000_000+i) == nil {
					atomic.AddInt64(&took, 1)
				}
			}
		}()
	}
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return atomic.LoadInt64(&tried), atomic.LoadInt64(&took)
	}
}

// within measures how long cond takes to hold (polled every 50 ms, at most
// a minute), failing the test after a minute.
func (a *adversary) within(what string, cond func() (bool, string)) time.Duration {
	a.t.Helper()
	start := time.Now()
	eventually(a.t, what, time.Minute, 50*time.Millisecond, cond)
	return time.Since(start)
}
