package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// goFloorSource is the smallest Go CNI plugin there is: it answers VERSION
// and nothing else. Its whole process is what any Go plugin's call costs
// before it does anything (the runtime's start, stdin, stdout, exit).
const goFloorSource = `package main

import (
	"io"
	"os"
)

func main() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	_, _ = os.Stdout.WriteString("{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}\n")
}
`

// buildGoFloor builds goFloorSource in dir with the go on PATH and the flags
// stickyip is built with (the Makefile's: no cgo, -trimpath, -s -w), and
// returns the binary.
func buildGoFloor(dir string) (string, error) {
	src := filepath.Join(dir, "gofloor")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, body := range map[string]string{"go.mod": "module gofloor\n\ngo 1.24\n", "main.go": goFloorSource} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	bin := filepath.Join(src, "gofloor")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the Go floor: %v: %s", err, out)
	}
	return bin, nil
}
