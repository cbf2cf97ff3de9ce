package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stickyip/stickyip/checkpointd/config"
	"github.com/stickyip/stickyip/checkpointd/reconcile"
)

// runnable is one of the daemon's parts that runs until ctx is done; an
// error ends the whole daemon (its other parts are stopped).
type runnable struct {
	name string
	run  func(ctx context.Context) error
}

// runnables lists the parts p runs: the API client, the reconciler and the
// heap's releaser always; the HTTP endpoints, the data directory's watch,
// the record's watch, the publisher and the retention follower when
// configured.
func (p *parts) runnables(cfg config.Config, ln net.Listener) []runnable {
	rs := []runnable{
		{"api", p.api.Run},
		{"reconcile", func(ctx context.Context) error { return p.rec.Run(ctx, cfg.Interval) }},
		{"heap", p.memory.run},
	}
	if ln != nil {
		h := Handler(p.m, p.rec, 3*cfg.Interval+cfg.Timeout)
		rs = append(rs, runnable{"http", func(ctx context.Context) error { return serveHTTP(ctx, ln, h, cfg.Log) }})
	}
	if cfg.DataDir != "" {
		rs = append(rs, runnable{"data-dir", func(ctx context.Context) error { return watchDataDir(ctx, cfg.DataDir, cfg.Interval) }})
	}
	if p.pub != nil {
		rs = append(rs, runnable{"record-watch", p.watcher.Run}, runnable{"publisher", p.pub.Run})
	}
	if p.follow != nil {
		rs = append(rs, runnable{"retention", p.follow.Run})
	}
	return rs
}

// serve runs p's parts until ctx is done or one of them fails, then stops
// checkpointd's static copies.
func serve(ctx context.Context, cfg config.Config, p *parts) error {
	log := cfg.Log
	var ln net.Listener
	if cfg.ListenAddress != "" {
		var err error
		if ln, err = net.Listen("tcp", cfg.ListenAddress); err != nil {
			return fmt.Errorf("--listen-address %s: %w", cfg.ListenAddress, err)
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range p.runnables(cfg, ln) {
		g.Go(func() error {
			if err := r.run(gctx); err != nil {
				log.Error("checkpointd stopping", "part", r.name, "err", err)
				return err
			}
			return nil
		})
	}
	err := g.Wait()
	// No copy outlives its keeper: a copy nobody watches would never be
	// handed back, and its parent would wait for its IP forever. Its files
	// stay (see Run's doc).
	removed, serr := reconcile.StopCopies(cfg.StaticPodDir, cfg.VolumeDir)
	if len(removed) > 0 {
		log.Info("checkpointd stopping: its static copies removed", "copies", strings.Join(removed, ","))
	}
	if serr != nil {
		log.Error("checkpointd stopping: cannot remove its static copies; run `checkpointd cleanup`", "err", serr)
	}
	log.Info("checkpointd stopped")
	return err
}

// serveHTTP serves h on ln until ctx is done, then shuts the server down.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("HTTP server shutdown", "err", err)
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("HTTP server: %w", err)
	}
	return nil
}
