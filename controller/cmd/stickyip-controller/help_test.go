package main

import (
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// The controller's help names only flags, annotations, paths and objects
// that exist.
func TestHelpTellsTheTruth(t *testing.T) {
	h := harness.Help(t, func() { _, _ = config([]string{"--help"}) })
	flags := harness.HelpFlags(h)
	if len(flags) == 0 {
		t.Fatalf("stickyip-controller --help printed no flag:\n%s", h)
	}
	harness.CheckHelp(t, "stickyip-controller", h, flags)
}
