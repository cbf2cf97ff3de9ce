package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/stickyip/stickyip/controller/manager"
)

// The flags are the contract's, with its defaults.
func TestConfig(t *testing.T) {
	cfg, err := config(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := manager.Config{LeaderElect: true, LeaderElectionNamespace: "kube-system", LeaseName: "stickyip-controller",
		ListenAddress: ":9612", TombstoneTTL: 10 * time.Minute, QPS: 50, Burst: 100}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults %+v, want %+v", cfg, want)
	}
	cfg, err = config([]string{"--kubeconfig=/k", "--leader-elect=false", "--leader-election-namespace=ns", "--lease-name=l",
		"--listen-address=127.0.0.1:1", "--tombstone-ttl=1m", "--import-former-index", "--qps=5.5", "--burst=7"})
	if err != nil {
		t.Fatal(err)
	}
	want = manager.Config{Kubeconfig: "/k", LeaderElectionNamespace: "ns", LeaseName: "l", ListenAddress: "127.0.0.1:1",
		TombstoneTTL: time.Minute, ImportFormerIndex: true, QPS: 5.5, Burst: 7}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("flags %+v, want %+v", cfg, want)
	}
	for _, bad := range [][]string{{"--no-such-flag"}, {"extra"}, {"--tombstone-ttl=soon"}} {
		if _, err := config(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
