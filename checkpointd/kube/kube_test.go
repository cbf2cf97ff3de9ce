package kube

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stickyip/stickyip/checkpointd/kube/kubetest"
)

func podOn(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}}
}

// eventually polls cond for up to 5 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func names(pods []*corev1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}

// client returns a client of srv.
func client(t *testing.T, srv *kubetest.Server) *REST {
	t.Helper()
	cs, err := NewREST(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestWatchAndReachability(t *testing.T) {
	srv := kubetest.New(t, podOn("a", "node1"), podOn("b", "node2"))
	var down atomic.Bool
	c := New(client(t, srv), Options{
		Node: "node1", ProbeInterval: 10 * time.Millisecond, Timeout: time.Second,
		Probe: func(context.Context) error {
			if down.Load() {
				return errors.New("connection refused")
			}
			return nil
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	start := time.Now()
	if ok, since := c.Reachable(); ok || since.Before(start.Add(-time.Second)) {
		t.Errorf("before Run: reachable=%v since=%v, want unreachable since creation", ok, since)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	eventually(t, "reachable and synced", func() bool { ok, _ := c.Reachable(); return ok })
	if pods, synced := c.Pods(); !synced || names(pods) != "a" {
		t.Errorf("Pods = %s synced=%v, want only node1's pod a", names(pods), synced)
	}

	// Changes arrive through the watch.
	srv.Put(podOn("c", "node1"))
	srv.Put(podOn("d", "node2"))
	eventually(t, "pod c seen", func() bool { p, _ := c.Pods(); return names(p) == "a,c" })
	srv.Delete(Pods, "default", "a")
	eventually(t, "pod a gone", func() bool { p, _ := c.Pods(); return names(p) == "c" })

	// Outage: unreachable, with the time it started; the cache keeps the last word.
	before := time.Now()
	down.Store(true)
	eventually(t, "unreachable", func() bool { ok, _ := c.Reachable(); return !ok })
	_, since := c.Reachable()
	if since.Before(before) {
		t.Errorf("unreachable since %v, want after %v", since, before)
	}
	if p, _ := c.Pods(); names(p) != "c" {
		t.Errorf("cache during outage = %s, want c", names(p))
	}
	down.Store(false)
	eventually(t, "reachable again", func() bool { ok, _ := c.Reachable(); return ok })
}

func TestSecretAndConfigMap(t *testing.T) {
	srv := kubetest.New(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "default"}, Data: map[string][]byte{"k": []byte("v")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "default"},
			Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {0, 1}}},
	)
	c := New(client(t, srv), Options{Node: "node1"})
	ctx := context.Background()
	s, err := c.Secret(ctx, "default", "s")
	if err != nil || string(s["k"]) != "v" {
		t.Errorf("Secret = %v, %v", s, err)
	}
	cm, err := c.ConfigMap(ctx, "default", "cm")
	if err != nil || string(cm["a"]) != "1" || len(cm["b"]) != 2 {
		t.Errorf("ConfigMap = %v, %v", cm, err)
	}
	if _, err := c.Secret(ctx, "default", "missing"); !IsNotFound(err) {
		t.Errorf("missing secret: %v, want not found", err)
	}
}

// TestForbiddenListIsNotAnOutage: an API server that answers but refuses the
// pod list (RBAC) is not "away": the unreachability clock stays at zero so
// no restore can start. The verdict waits for proof that the client had its
// chance to get it wrong (a fixed sleep passes with no
// probe run at all): probes answered and pod lists refused, then an hour
// on the client's clock.
func TestForbiddenListIsNotAnOutage(t *testing.T) {
	srv := kubetest.New(t)
	srv.Refuse("list", Pods, 403)
	srv.Refuse("watch", Pods, 403)
	var probes atomic.Int64
	var clock atomic.Int64 // nanoseconds since the Unix epoch
	clock.Store(time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	created := now()
	c := New(client(t, srv), Options{
		Node: "node1", ProbeInterval: 10 * time.Millisecond, Now: now,
		Probe: func(context.Context) error { probes.Add(1); return nil },
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "3 probes answered and 2 pod lists refused", func() bool { return probes.Load() >= 3 && srv.Refusals() >= 2 })
	clock.Add(int64(time.Hour))
	ok, since := c.Reachable()
	if ok {
		t.Fatalf("reachable although the pod list was never received (%d probes, %d refusals)", probes.Load(), srv.Refusals())
	}
	if !since.Equal(now()) {
		t.Errorf("unreachable since %v (created %v, now %v), %d probes answered: want the clock held at zero, since = now", since, created, now(), probes.Load())
	}
}
