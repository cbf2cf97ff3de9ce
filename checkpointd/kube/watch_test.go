package kube

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// apiServer is a minimal API server: /readyz, and a pod list and watch on
// which the watch stays open, as a real API server keeps it.
type apiServer struct {
	*httptest.Server
	watches atomic.Int32
}

func newAPIServer(t *testing.T) *apiServer {
	s := &apiServer{}
	done := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/readyz":
			fmt.Fprint(w, "ok")
		case r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("watch") == "true":
			s.watches.Add(1)
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
			}
			w.(http.Flusher).Flush()
			select { // hold the watch open until the client or the test ends it
			case <-r.Context().Done():
			case <-done:
			}
		case r.URL.Path == "/api/v1/pods":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(done); s.Close() })
	return s
}

// rest.Config.Timeout also bounds the watch, so every node
// re-opened its pod watch every --timeout (24 watches in 120 s at 5 s). The
// watch must stay open for longer than many request timeouts.
func TestWatchOutlivesTheRequestTimeout(t *testing.T) {
	srv := newAPIServer(t)
	timeout := 200 * time.Millisecond
	cs, err := NewREST(&rest.Config{Host: srv.URL, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	c := New(cs, Options{Node: "node1", ProbeInterval: 50 * time.Millisecond, Timeout: timeout,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	eventually(t, "reachable and synced", func() bool { ok, _ := c.Reachable(); return ok })
	time.Sleep(15 * timeout)
	if n := srv.watches.Load(); n != 1 {
		t.Fatalf("%d pod watches opened in %v with a %v request timeout; want 1 long-lived watch", n, 15*timeout, timeout)
	}
	if ok, _ := c.Reachable(); !ok {
		t.Fatal("not reachable at the end")
	}
}
