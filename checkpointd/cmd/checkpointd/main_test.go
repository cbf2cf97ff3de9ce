package main

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestEnvFallback(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	grace := fs.Duration("grace-period", time.Minute, "")
	node := fs.String("node-name", "host", "")
	dir := fs.String("static-pod-dir", "/etc/kubernetes/manifests", "")
	if err := fs.Parse([]string{"--node-name=fromflag"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"CHECKPOINTD_GRACE_PERIOD":   "30s",
		"CHECKPOINTD_NODE_NAME":      "fromenv",
		"CHECKPOINTD_STATIC_POD_DIR": "/tmp/manifests",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := envFallback(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if *grace != 30*time.Second || *dir != "/tmp/manifests" {
		t.Errorf("env not applied: grace=%v dir=%s", *grace, *dir)
	}
	if *node != "fromflag" {
		t.Errorf("env overrode a flag given on the command line: %s", *node)
	}
	env["CHECKPOINTD_GRACE_PERIOD"] = "soon"
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.Duration("grace-period", time.Minute, "")
	_ = fs2.Parse(nil)
	if err := envFallback(fs2, lookup); err == nil || !strings.Contains(err.Error(), "CHECKPOINTD_GRACE_PERIOD") {
		t.Errorf("bad env value: err = %v, want one naming the variable", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	if code := run([]string{"--volumes=maybe", "--node-name=n", "--kubeconfig=/nonexistent", "--listen-address="}); code != 1 {
		t.Errorf("exit code %d for an invalid --volumes, want 1", code)
	}
	if code := run([]string{"extra-arg"}); code != 2 {
		t.Errorf("exit code %d for a stray argument, want 2", code)
	}
}
