package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// RecorderType is the CNI type of the call recorder (test/harness/cnirecord),
// a plugin that, chained after the real ones, appends every call the runtime
// makes (verb, CNI_* environment, runtimeConfig) to a file and passes the
// previous result on unchanged.
const RecorderType = "cnirecord"

// RecorderPlugin is the conflist entry of the recorder writing to
// recordFile; it asks for the pod annotations, as stickyip's entries do.
func RecorderPlugin(recordFile string) map[string]any {
	return map[string]any{
		"type":         RecorderType,
		"recordFile":   recordFile,
		"capabilities": map[string]any{"io.kubernetes.cri.pod-annotations": true},
	}
}

// BuildRecorder compiles the recorder into dir (a CNI bin dir) and returns
// its path.
func BuildRecorder(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, RecorderType)
	buildCommand(t, "./test/harness/cnirecord", bin)
	return bin
}

// RecordedCall is one CNI call the recorder saw.
type RecordedCall struct {
	// Command is the CNI verb: ADD, DEL, CHECK, GC or STATUS.
	Command string `json:"command"`
	// ContainerID, Netns, IfName and Args are CNI_CONTAINERID, CNI_NETNS,
	// CNI_IFNAME and CNI_ARGS.
	ContainerID string `json:"containerID"`
	Netns       string `json:"netns"`
	IfName      string `json:"ifName"`
	Args        string `json:"args"`
	// CNIVersion is the cniVersion the runtime gave the plugin.
	CNIVersion string `json:"cniVersion"`
	// RuntimeConfig is the runtimeConfig the runtime passed (only the
	// capabilities the plugin declares).
	RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig"`
	// ValidAttachments is what a GC call declared still valid
	// (cni.dev/valid-attachments).
	ValidAttachments []struct {
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifname"`
	} `json:"validAttachments"`
}

// Annotations returns the pod annotations the runtime passed in the
// io.kubernetes.cri.pod-annotations capability; nil when it passed none.
func (c RecordedCall) Annotations() map[string]string {
	raw, ok := c.RuntimeConfig["io.kubernetes.cri.pod-annotations"]
	if !ok {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil
	}
	return m
}

// RecordedCalls reads what the recorder wrote to recordFile, in call order;
// none when it was never called.
func RecordedCalls(recordFile string) ([]RecordedCall, error) {
	f, err := os.Open(recordFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var calls []RecordedCall
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for s.Scan() {
		var c RecordedCall
		if err := json.Unmarshal(s.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %w: %q", recordFile, err, s.Text())
		}
		calls = append(calls, c)
	}
	return calls, s.Err()
}
