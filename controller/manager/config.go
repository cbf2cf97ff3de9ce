package manager

import (
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// Config is the controller's configuration, resolved once from its flags
// (controller/cmd/stickyip-controller); the fields below the flags' are
// the contract's fixed times, which tests shorten.
type Config struct {
	// Kubeconfig is the kubeconfig file ("": the in-cluster configuration).
	Kubeconfig string
	// LeaderElect: only the holder of the Lease
	// LeaderElectionNamespace/LeaseName writes; false: this one writes.
	LeaderElect             bool
	LeaderElectionNamespace string
	LeaseName               string
	// ListenAddress serves /healthz, /readyz and /metrics.
	ListenAddress string
	// TombstoneTTL is how long a deleted pod's facts still check a claim.
	TombstoneTTL time.Duration
	// ImportFormerIndex accepts a gone pod's entry that the node's own line
	// in the former ConfigMap shards (stickyip-index-0 … -7) backs: during
	// an upgrade from them only, while the former index policy keeps those
	// names the nodes' (once it is removed, a namespace's editors could
	// write them).
	ImportFormerIndex bool
	// QPS and Burst bound the controller's requests.
	QPS   float32
	Burst int

	// Identity names this replica in the Lease (default: host name and a
	// UUID).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// BatchWindow is how long a pass waits, after the first change, for
	// the changes that come with it: a burst of claims is one pass.
	BatchWindow time.Duration
	// PendingFor is how long a claim's pod is waited for in the cache
	// before the claim is refused.
	PendingFor time.Duration
	// NodeGrace is how long a Node is gone before its record is deleted.
	NodeGrace time.Duration
	// EventInterval is the least time between two Events of one node and
	// rule.
	EventInterval time.Duration
	// FormerTTL is how long the former shards of a namespace are kept once
	// read.
	FormerTTL time.Duration
	// Writers is how many status writes a pass makes at once.
	Writers int
}

// Defaults returns the contract's defaults.
func Defaults() Config {
	return Config{LeaderElect: true, LeaderElectionNamespace: "kube-system", LeaseName: "stickyip-controller",
		ListenAddress: ":9612", TombstoneTTL: 10 * time.Minute, QPS: 50, Burst: 100}
}

// complete returns c with every unset fixed time at its default.
func (c Config) complete() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.LeaseDuration, 15*time.Second)
	set(&c.RenewDeadline, 10*time.Second)
	set(&c.RetryPeriod, 2*time.Second)
	set(&c.BatchWindow, 200*time.Millisecond)
	set(&c.PendingFor, time.Minute)
	set(&c.NodeGrace, time.Minute)
	set(&c.EventInterval, time.Minute)
	set(&c.FormerTTL, 5*time.Minute)
	if c.Writers <= 0 {
		c.Writers = 8
	}
	if c.Identity == "" {
		host, _ := os.Hostname()
		c.Identity = fmt.Sprintf("%s_%s", host, uuid.NewUUID())
	}
	return c
}

// check reports the first value that cannot work.
func (c Config) check() error {
	switch {
	case c.TombstoneTTL <= 0:
		return fmt.Errorf("--tombstone-ttl %v: want a positive duration", c.TombstoneTTL)
	case c.LeaderElect && (c.LeaderElectionNamespace == "" || c.LeaseName == ""):
		return fmt.Errorf("--leader-election-namespace and --lease-name are required with --leader-elect")
	case c.QPS < 0 || c.Burst < 0:
		return fmt.Errorf("--qps %v, --burst %d: want values of 0 or more", c.QPS, c.Burst)
	}
	return nil
}
