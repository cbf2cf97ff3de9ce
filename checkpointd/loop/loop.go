// Package loop is how checkpointd's parts run: a pass at once and then every
// interval, or sooner when woken, until the context ends (Every); and a
// failure logged when it differs from the last one of its kind (Once), so
// that an API server away for an hour is one line, not one per pass.
package loop

import (
	"context"
	"time"
)

// Every runs pass at once and then every interval, and also whenever wake
// receives (a nil wake never does), until ctx is done (it then returns nil)
// or pass returns an error (it returns that error: the part has ended).
func Every(ctx context.Context, interval time.Duration, wake <-chan struct{}, pass func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := pass(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}
