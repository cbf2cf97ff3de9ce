package checkpoint

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stickyip/stickyip/checkpointd/safefile"
)

// FuzzDecode: a checkpoint file's content is either a verified record or an
// ErrCorrupt error, never a panic; what is accepted frames back to the same
// bytes.
func FuzzDecode(f *testing.F) {
	good, _ := jsonRecord()
	f.Add(safefile.Frame(Format, good))
	f.Add([]byte(`{"format":"stickyip.io/checkpoint/v1","length":2,"sha256":"x"}` + "\n{}"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if rec.Pod == nil {
			t.Fatal("accepted a record without a pod")
		}
		payload, err := safefile.Unframe(Format, data)
		if err != nil || !bytes.Equal(safefile.Frame(Format, payload), data) {
			t.Fatalf("accepted data that does not frame back: %v", err)
		}
	})
}
