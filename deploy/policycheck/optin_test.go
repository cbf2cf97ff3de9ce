package policycheck

import (
	"strings"
	"testing"

	"github.com/stickyip/stickyip/contract"
)

// The namespace opt-in's setting ends in "-fixed" to make its
// StatefulSet pods' reservations fixed (stickyip.io/retention: fixed)
// rather than following their StatefulSet; its placement mode stays what
// it was. The policy's variables, evaluated with the API server's CEL,
// read each value as Go reads it here.
func TestOptInSettingReadsAsGo(t *testing.T) {
	p := mutatingPolicy(t, "stickyip-statefulsets")
	progs := map[string]func(string) any{}
	for _, name := range []string{"duration", "mode", "fixed"} {
		prg := program(t, variable(t, p.Spec.Variables, name))
		progs[name] = func(setting string) any {
			return eval(t, prg, map[string]any{"variables": map[string]any{"setting": setting}})
		}
	}
	for _, setting := range []string{"30m", "30m-required", "30m-preferred", "30m-fixed", "30m-required-fixed", "10-preferred-fixed", "0-fixed", "90s"} {
		rest, fixed := strings.CutSuffix(setting, "-"+contract.RetentionFixed)
		duration, mode, _ := strings.Cut(rest, "-")
		if got := progs["duration"](setting); got != duration {
			t.Errorf("%q: duration %v, want %q", setting, got, duration)
		}
		if got := progs["mode"](setting); got != mode {
			t.Errorf("%q: mode %v, want %q", setting, got, mode)
		}
		if got := progs["fixed"](setting); got != fixed {
			t.Errorf("%q: fixed %v, want %v", setting, got, fixed)
		}
	}
}
