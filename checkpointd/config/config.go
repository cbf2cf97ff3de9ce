// Package config is checkpointd's settings: the one value every command of
// the binary is built from (the daemon, cleanup, rebuild-store, install and
// uninstall), with its checks (Validate) and the settings derived from
// others (Resolve: the static pod directory, flannel's subnet file).
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/formats"
	"github.com/stickyip/stickyip/checkpointd/policy"
	"github.com/stickyip/stickyip/contract"
)

// Config is every setting of checkpointd (see cmd/checkpointd for flags and defaults).
type Config struct {
	NodeName                  string
	Kubeconfig                string // "" or "in-cluster": in-cluster config
	CheckpointDir             string
	StaticPodDir              string
	KubeletConfig             string // the kubelet's config file; its staticPodPath wins when set
	VolumeDir                 string
	CRIEndpoint               string
	DataDir                   string // stickyip data dir; "" disables IPAM reconciliation
	CNIConfDir                string // CNI network configs, for pool sizes and flannel networks; "" disables
	FlannelSubnetFile         string // flanneld's lease; "auto": the flannel plugin's (see flannel.SubnetFile); "" disables keeping it
	AllowNamespaces           string
	AllowPrivilegedNamespaces string
	Grace                     time.Duration
	Stable                    time.Duration
	Interval                  time.Duration
	ProbeInterval             time.Duration
	Timeout                   time.Duration
	Refresh                   time.Duration
	LeakMinAge                time.Duration
	RestoreTimeout            time.Duration
	CorruptRetention          time.Duration
	Reservation               string
	Volumes                   string // "copy" or "drop"
	ListenAddress             string // "" disables the HTTP endpoints
	Placement                 bool   // publish the node's sticky identities in its NodeRecord, for the placement index (needs DataDir)
	FollowStatefulSets        bool   // StatefulSet pods' reservations end as their volume claims do, as stickyip-controller says (needs Placement)
	RebuildStore              bool   // rebuild a damaged or lost IPAM store (needs DataDir)
	CNIResultsDir             string // the runtime's CNI result cache, a rebuild's source
	Log                       *slog.Logger
}

// Validate checks the config and names the offending setting.
func (c *Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate that also returns the namespace policy it parsed, so
// that Resolve parses it once.
func (c *Config) validate() (policy.Policy, error) {
	switch {
	case c.NodeName == "":
		return policy.Policy{}, errors.New("--node-name is empty (and NODE_NAME and the host name gave nothing)")
	case c.CheckpointDir == "":
		return policy.Policy{}, errors.New("--checkpoint-dir is empty")
	case c.StaticPodDir == "":
		return policy.Policy{}, errors.New("--static-pod-dir is empty")
	case c.VolumeDir == "":
		return policy.Policy{}, errors.New("--volume-dir is empty")
	case c.Grace <= 0:
		return policy.Policy{}, fmt.Errorf("--grace-period %s: must be > 0", c.Grace)
	case c.Stable < 0:
		return policy.Policy{}, fmt.Errorf("--api-stable-period %s: must be >= 0", c.Stable)
	case c.Interval <= 0:
		return policy.Policy{}, fmt.Errorf("--interval %s: must be > 0", c.Interval)
	case c.RestoreTimeout <= 0:
		return policy.Policy{}, fmt.Errorf("--restore-timeout %s: must be > 0", c.RestoreTimeout)
	case c.Volumes != "copy" && c.Volumes != "drop":
		return policy.Policy{}, fmt.Errorf("--volumes %q: want copy or drop", c.Volumes)
	}
	pol, err := policy.Parse(c.AllowNamespaces, c.AllowPrivilegedNamespaces)
	if err != nil {
		return policy.Policy{}, err
	}
	if c.Reservation != "" {
		// The value becomes the copy's reservation annotation: check it with
		// the plugin's own parser, or the copy would never get a network.
		if _, err := contract.ParseReservedDuration(c.Reservation); err != nil {
			return policy.Policy{}, fmt.Errorf("--restore-reservation: %w", err)
		}
	}
	return pol, nil
}

// Resolve checks c and returns it with the settings derived from others
// resolved (the static pod directory, flannel's subnet file) and the
// namespace policy it parsed: the one value daemon.Run builds the daemon
// from.
func (c Config) Resolve() (Config, policy.Policy, error) {
	pol, err := c.validate()
	if err != nil {
		return c, pol, err
	}
	if c.StaticPodDir, err = c.ResolveStaticPodDir(); err != nil {
		return c, pol, err
	}
	if c.FlannelSubnetFile, err = flannel.SubnetFile(c.FlannelSubnetFile, c.CNIConfDir); err != nil {
		return c, pol, err
	}
	return c, pol, nil
}

// ResolveStaticPodDir returns the static pod directory checkpointd writes
// to: the staticPodPath of the kubelet's config when --kubelet-config is set,
// else --static-pod-dir. The daemon, cleanup and the installer all resolve
// it here.
func (c *Config) ResolveStaticPodDir() (string, error) {
	if c.KubeletConfig == "" {
		return c.StaticPodDir, nil
	}
	p, err := formats.StaticPodPath(c.KubeletConfig)
	if err != nil {
		return "", fmt.Errorf("--kubelet-config: %w", err)
	}
	return p, nil
}

// RestConfig builds the API client config. A kubeconfig is used as is (the
// kubelet's own, /etc/kubernetes/kubelet.conf, works on kubeadm nodes: it is
// on local disk, needs no API server to load, and carries the node's
// identity, which the Node authorizer limits to what the node's pods use).
func RestConfig(kubeconfig string, timeout time.Duration) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" || kubeconfig == "in-cluster" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("API client config (--kubeconfig %q): %w", kubeconfig, err)
	}
	cfg.Timeout = timeout
	cfg.UserAgent = "checkpointd"
	return cfg, nil
}

// DefaultNodeName returns NODE_NAME, else the lower-cased host name (the kubelet's default).
func DefaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return strings.ToLower(h)
}
