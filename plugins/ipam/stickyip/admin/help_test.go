package admin_test

import (
	"bytes"
	"testing"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
	"github.com/stickyip/stickyip/test/harness"
)

// The tool's usage and each command's help name only flags, annotations,
// paths and objects that exist.
func TestHelpTellsTheTruth(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := admin.Run([]string{"help"}, &out, &errOut); code != 0 {
		t.Fatalf("stickyip help: exit %d: %s", code, errOut.String())
	}
	helps := map[string]string{"stickyip": out.String()}
	var flags []string
	for _, cmd := range []string{"list", "release", "gc", "import", "check", "status"} {
		var o, e bytes.Buffer
		admin.Run([]string{cmd, "--help"}, &o, &e)
		h := o.String() + e.String()
		if len(harness.HelpFlags(h)) == 0 {
			t.Fatalf("stickyip %s --help printed no flag:\n%s", cmd, h)
		}
		helps["stickyip "+cmd] = h
		flags = append(flags, harness.HelpFlags(h)...)
	}
	for cmd, h := range helps {
		harness.CheckHelp(t, cmd, h, flags)
	}
}
