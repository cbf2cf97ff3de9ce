package safefile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrCorrupt is wrapped by Unframe's errors: the data is not what Frame wrote.
var ErrCorrupt = errors.New("checkpoint corrupt")

type header struct {
	Format string `json:"format"`
	Length int    `json:"length"`
	SHA256 string `json:"sha256"`
}

// Frame returns payload behind a header line naming its format, length and
// SHA-256, the layout of every file checkpointd must be able to trust later.
func Frame(format string, payload []byte) []byte {
	sum := sha256.Sum256(payload)
	h, _ := json.Marshal(header{Format: format, Length: len(payload), SHA256: hex.EncodeToString(sum[:])})
	var buf bytes.Buffer
	buf.Grow(len(h) + 1 + len(payload))
	buf.Write(h)
	buf.WriteByte('\n')
	buf.Write(payload)
	return buf.Bytes()
}

// Unframe verifies data written by Frame with the same format and returns
// its payload; anything else is an error wrapping ErrCorrupt.
func Unframe(format string, data []byte) ([]byte, error) {
	line, payload, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return nil, fmt.Errorf("no header line: %w", ErrCorrupt)
	}
	var h header
	if err := json.Unmarshal(line, &h); err != nil {
		return nil, fmt.Errorf("bad header: %v: %w", err, ErrCorrupt)
	}
	if h.Format != format {
		return nil, fmt.Errorf("unknown format %q: %w", h.Format, ErrCorrupt)
	}
	// Frame writes exactly one spelling of a header; anything else (keys in
	// another case or order, spaces, repeated or unknown keys) was not
	// written by it, even when its checksum matches.
	if canonical, _ := json.Marshal(h); !bytes.Equal(line, canonical) {
		return nil, fmt.Errorf("header is not as written (%.80q): %w", line, ErrCorrupt)
	}
	if len(payload) != h.Length {
		return nil, fmt.Errorf("payload is %d bytes, header says %d (truncated or extended): %w", len(payload), h.Length, ErrCorrupt)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return nil, fmt.Errorf("checksum mismatch: %w", ErrCorrupt)
	}
	return payload, nil
}
