// Command cnirecord is a CNI plugin for the harness that records how the
// runtime calls a network: chained after the real plugins, it appends one JSON
// line per call (verb, CNI_* environment, the runtimeConfig it was given) to
// the file named by its "recordFile" key, and passes the previous result on
// unchanged. It never fails a call of its own accord, so it shows what the
// runtime does without changing it.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// conf is the plugin's network configuration.
type conf struct {
	types.NetConf
	RecordFile       string               `json:"recordFile"`
	RuntimeConfig    map[string]any       `json:"runtimeConfig,omitempty"`
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
}

// call is one recorded line; harness.RecordedCall reads it.
type call struct {
	Command       string         `json:"command"`
	ContainerID   string         `json:"containerID"`
	Netns         string         `json:"netns"`
	IfName        string         `json:"ifName"`
	Args          string         `json:"args"`
	CNIVersion    string         `json:"cniVersion"`
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
	// ValidAttachments is GC's cni.dev/valid-attachments.
	ValidAttachments []types.GCAttachment `json:"validAttachments,omitempty"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return record("ADD", a, true) },
		Del:    func(a *skel.CmdArgs) error { return record("DEL", a, false) },
		Check:  func(a *skel.CmdArgs) error { return record("CHECK", a, false) },
		GC:     func(a *skel.CmdArgs) error { return record("GC", a, false) },
		Status: func(a *skel.CmdArgs) error { return record("STATUS", a, false) },
	}, version.All, "cnirecord: records the runtime's CNI calls (stickyip test harness)")
}

func record(cmd string, a *skel.CmdArgs, printResult bool) error {
	var c conf
	if err := json.Unmarshal(a.StdinData, &c); err != nil {
		return types.NewError(types.ErrDecodingFailure, "cnirecord: parse config", err.Error())
	}
	if c.RecordFile == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, "cnirecord: recordFile missing", "")
	}
	line, err := json.Marshal(call{Command: cmd, ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName,
		Args: a.Args, CNIVersion: c.CNIVersion, RuntimeConfig: c.RuntimeConfig, ValidAttachments: c.ValidAttachments})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(c.RecordFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cnirecord: open record file", err.Error())
	}
	// One write per line: O_APPEND keeps concurrent calls' lines whole.
	_, err = f.Write(append(line, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return types.NewError(types.ErrIOFailure, "cnirecord: write record file", err.Error())
	}
	if !printResult {
		return nil
	}
	if err := version.ParsePrevResult(&c.NetConf); err != nil {
		return err
	}
	if c.PrevResult == nil {
		return fmt.Errorf("cnirecord: ADD without prevResult: chain it after a plugin that returns one")
	}
	return types.PrintResult(c.PrevResult, c.CNIVersion)
}
