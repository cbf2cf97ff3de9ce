package safefile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, content := range []string{"one", "two"} {
		if err := Write(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(p)
		if string(got) != content {
			t.Errorf("content %q, want %q", got, content)
		}
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d files in dir, want no temporary files left", len(entries))
	}
}

func TestUnframeRefusesWhatFrameDidNotWrite(t *testing.T) {
	good := Frame("f/v1", []byte("payload"))
	if p, err := Unframe("f/v1", good); err != nil || string(p) != "payload" {
		t.Fatalf("Unframe(Frame) = %q, %v", p, err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)-1] ^= 1
	// A header Go's JSON decoder reads as the same values, but that Frame
	// never writes (CI's fuzzer found the key case first).
	respelled := func(old, new string) []byte {
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	for name, data := range map[string][]byte{
		"other format": good, "flipped byte": flipped, "truncated": good[:len(good)-1], "no header": []byte("payload"),
		"key case":     respelled(`"format"`, `"Format"`),
		"space":        respelled(`{"format"`, `{ "format"`),
		"repeated key": respelled(`"length"`, `"length":0,"length"`),
		"unknown key":  respelled(`{"format"`, `{"x":1,"format"`),
	} {
		format := "f/v1"
		if name == "other format" {
			format = "g/v1"
		}
		if _, err := Unframe(format, data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", name, err)
		}
	}
}
