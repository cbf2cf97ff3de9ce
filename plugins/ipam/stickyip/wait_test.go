package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/stickyip/stickyip/reservation"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// waitConf is a network whose pods share the identity default/web (when
// identity is set) and keep it reserved, with the given ipam.holderWait.
func waitConf(dataDir, holderWait string, identity bool) []byte {
	m := map[string]any{
		"cniVersion": "1.1.0", "name": "testnet", "type": "bridge",
		"ipam": map[string]any{"type": "stickyip", "dataDir": dataDir, "hostLocalDataDir": "", "holderWait": holderWait,
			"ranges": []any{[]any{map[string]string{"subnet": "10.77.0.0/29"}}}},
	}
	if identity {
		m["runtimeConfig"] = map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{
			"stickyip.io/identity": "web", "io.kubernetes.cri/reserved-ip-duration": "10"}}
	}
	b, _ := json.Marshal(m)
	return b
}

// cniArgs is one call of this test: the netns is a live namespace, so a
// holder counts as running until its DEL.
func cniArgs(cid, pod string, conf []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: cid, Netns: "/proc/self/ns/net", IfName: "eth0", Args: podArgs(pod, pod+"-uid"), StdinData: conf}
}

func holderOf(t *testing.T, dataDir, ip string) string {
	t.Helper()
	var cid string
	err := boltstore.New(dataDir, 0).View("testnet", func(tx reservation.Txn) error {
		return tx.ForEach(func(r *reservation.Record) error {
			if r.IP.String() == ip && r.State == reservation.Allocated {
				cid = r.ContainerID
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return cid
}

// No needless wait: a Deployment pod with stickyip.io/identity is
// replaced before its old sandbox is gone. The replacement's ADD waits (the
// store unlocked: other pods' calls go on) and gets the address within about
// 2 s of the old sandbox's DEL, instead of failing with error 11 and being
// retried by the kubelet ~11 s later.
func TestAddWaitsForPreviousHolder(t *testing.T) {
	dir := t.TempDir()
	conf := waitConf(dir, "10s", true)
	if err := cmdAdd(cniArgs("old", "web-a", conf)); err != nil {
		t.Fatalf("first pod: %v", err)
	}
	const ip = "10.77.0.2"
	if got := holderOf(t, dir, ip); got != "old" {
		t.Fatalf("%s held by %q, want old", ip, got)
	}

	type outcome struct {
		err error
		at  time.Time
	}
	// Each time the replacement finds the holder alive (and is about to
	// sleep, the store unlocked), it says so: the verdicts below wait for
	// that, not for a sleep (no fixed time is enough for the goroutine to be
	// waiting on a loaded machine).
	polls := make(chan struct{}, 64)
	holderAlive = func() {
		select {
		case polls <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { holderAlive = nil })
	done := make(chan outcome, 1)
	go func() {
		err := cmdAdd(cniArgs("new", "web-b", conf))
		done <- outcome{err, time.Now()}
	}()
	waiting := func(what string) {
		t.Helper()
		select {
		case <-polls:
		case o := <-done:
			t.Fatalf("replacement's ADD returned (%v) while the old sandbox still runs (%s)", o.err, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("replacement's ADD neither waits for the holder nor returns after 10 s (%s)", what)
		}
	}
	waiting("its first look")

	// Meanwhile another pod's ADD runs at once: the waiting call holds no lock.
	start := time.Now()
	if err := cmdAdd(cniArgs("other", "db", waitConf(dir, "10s", false))); err != nil {
		t.Fatalf("another pod's ADD while the replacement waits: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("another pod's ADD took %v while the replacement waited: the lock is held", took)
	}
	// It goes on waiting: two more looks, the old sandbox still running.
	waiting("after another pod's ADD")
	waiting("after another pod's ADD")

	delAt := time.Now()
	if err := cmdDel(cniArgs("old", "web-a", conf)); err != nil {
		t.Fatalf("old sandbox's DEL: %v", err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("replacement's ADD after the old sandbox's DEL: %v", o.err)
	}
	lag := o.at.Sub(delAt)
	t.Logf("replacement's ADD returned %v after the old sandbox's DEL", lag)
	if lag > 2*time.Second {
		t.Fatalf("replacement ran %v after the DEL, want within 2s", lag)
	}
	if got := holderOf(t, dir, ip); got != "new" {
		t.Fatalf("%s held by %q after the wait, want the replacement (new)", ip, got)
	}

	// The wait is bounded: with the holder alive the ADD fails with error 11
	// naming it once ipam.holderWait has passed.
	start = time.Now()
	err := cmdAdd(cniArgs("third", "web-c", waitConf(dir, "1s", true)))
	took := time.Since(start)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater || !strings.Contains(te.Msg, "new") {
		t.Fatalf("ADD while the holder runs on: %v; want error 11 naming the holder", err)
	}
	if took < time.Second || took > 3*time.Second {
		t.Fatalf("ADD with holderWait 1s failed after %v", took)
	}
}
