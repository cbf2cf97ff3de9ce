package boot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// Clock keeps the time of the node's last successful contact with the API
// server (its /readyz answered and the pod watch had synced) on persistent
// disk, so that after a reboot checkpointd knows how long the node has been
// cut off, and never restores a pod whose controller may have replaced it
// elsewhere meanwhile (state.ReplacementOf).
//
// The file is written atomically, at most every ContactWriteEvery while the
// API server answers: what it holds is at most ContactWriteEvery older than
// the real last contact, which only overstates the time out of contact (the
// safe side). A missing or unreadable file, or a clock set back below it,
// means "unknown": out of contact forever.

// ContactFileName is the clock's file in checkpointd's checkpoint
// directory.
const ContactFileName = "api-contact"

// ContactWriteEvery is the longest the file lags behind the last contact.
const ContactWriteEvery = 10 * time.Second

type Clock struct {
	path    string
	last    time.Time // last contact known; zero: unknown
	written time.Time // last contact written to disk
}

// OpenClock reads the clock kept in dir. A missing file is an unknown last
// contact; a file that cannot be read or parsed is one too, and the error
// says why (the caller logs it; checkpointd must still run).
func OpenClock(dir string) (*Clock, error) {
	c := &Clock{path: filepath.Join(dir, ContactFileName)}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("last API contact unknown: %w", err)
	}
	at, err := ParseContact(data)
	if err != nil {
		return c, fmt.Errorf("last API contact unknown: %s: %w", c.path, err)
	}
	c.last, c.written = at, at
	return c, nil
}

// ParseContact reads the file's content: one RFC 3339 time in UTC and a newline.
func ParseContact(data []byte) (time.Time, error) {
	s, ok := strings.CutSuffix(string(data), "\n")
	if !ok {
		return time.Time{}, errors.New("not one line")
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	if at.IsZero() || at.Location() != time.UTC {
		return time.Time{}, fmt.Errorf("time %q: want a UTC time after year 1", s)
	}
	return at, nil
}

func formatContact(at time.Time) []byte { return []byte(at.UTC().Format(time.RFC3339Nano) + "\n") }

// Contact records a successful contact at now, and writes it when the file
// lags by ContactWriteEvery or more.
func (c *Clock) Contact(now time.Time) error {
	if now.After(c.last) {
		c.last = now
	}
	if c.last.Sub(c.written) < ContactWriteEvery && !c.written.IsZero() {
		return nil
	}
	if err := safefile.Write(c.path, formatContact(c.last), 0o600); err != nil {
		return fmt.Errorf("record the last API contact: %w", err)
	}
	c.written = c.last
	return nil
}

// Since returns how long ago the last contact was, and false when that is
// unknown (never recorded, unreadable, or after now: the clock was set back).
func (c *Clock) Since(now time.Time) (time.Duration, bool) {
	if c.last.IsZero() || now.Before(c.last) {
		return 0, false
	}
	return now.Sub(c.last), true
}
