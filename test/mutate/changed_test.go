package main

import (
	"slices"
	"testing"
)

func TestTouched(t *testing.T) {
	pkgs := []string{"ipam", "checkpointd/state", "checkpointd/sanitize", "reservation/boltstore"}
	changed := []string{
		"ipam/engine_test.go",                            // a test file: the package's figures change
		"checkpointd/sanitize/testdata/fuzz/FuzzX/seed1", // its testdata too
		"reservation/fake/fake.go",                       // a sibling of boltstore, not boltstore
		"checkpointd/state/sub/x.go",                     // a package below state, not state
		"docs/testing.md",
	}
	got := touched(pkgs, changed)
	if want := []string{"ipam", "checkpointd/sanitize"}; !slices.Equal(got, want) {
		t.Fatalf("touched: %v, want %v", got, want)
	}
}

func TestCleanPackages(t *testing.T) {
	got := cleanPackages([]string{"./ipam", "ipam/", "./checkpointd/state/"})
	if want := []string{"ipam", "ipam", "checkpointd/state"}; !slices.Equal(got, want) {
		t.Fatalf("cleanPackages: %v, want %v", got, want)
	}
}
