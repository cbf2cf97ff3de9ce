package main

import (
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// Every command's help names only flags, annotations, paths and objects
// that exist: a help that names ConfigMaps the code does not write, or a
// flag it does not have, misleads the operator who reads it.
func TestHelpTellsTheTruth(t *testing.T) {
	helps := map[string]string{}
	var flags []string
	for _, cmd := range []string{"", "cleanup", "rebuild-store", "install", "uninstall", "ready", "stranded"} {
		args := []string{"--help"}
		if cmd != "" {
			args = append([]string{cmd}, args...)
		}
		h := harness.Help(t, func() { run(args) })
		if len(harness.HelpFlags(h)) == 0 {
			t.Fatalf("checkpointd %s --help printed no flag:\n%s", cmd, h)
		}
		helps["checkpointd "+cmd] = h
		flags = append(flags, harness.HelpFlags(h)...)
	}
	for cmd, h := range helps {
		harness.CheckHelp(t, cmd, h, flags)
	}
}
