package contract

import "time"

// Defaults both binaries use; docs/configuration.md documents
// them.
const (
	// DefaultDataDir is the plugin's dataDir and checkpointd's --data-dir.
	DefaultDataDir = "/var/lib/cni/stickyip"
	// DefaultCNIConfDir is where runtimes read CNI network configs: `stickyip
	// status --cni-conf-dir` and checkpointd's --cni-conf-dir.
	DefaultCNIConfDir = "/etc/cni/net.d"
	// DefaultFlannelSubnetFile is where flanneld writes the node's lease
	// (ParseFlannelLease), and where the flannel CNI plugin reads it when
	// its config names no subnetFile.
	DefaultFlannelSubnetFile = "/run/flannel/subnet.env"
	// DefaultCNIResultsDir is where libcni keeps the runtime's CNI result
	// cache (its CacheDir, /var/lib/cni, and "results"): ReadCNICache.
	DefaultCNIResultsDir = "/var/lib/cni/results"
	// DefaultHostLocalDataDir is host-local's own default data directory.
	DefaultHostLocalDataDir = "/var/lib/cni/networks"
	// DefaultLockTimeout bounds the wait for the store's lock.
	DefaultLockTimeout = 10 * time.Second
	// DefaultMaxDuration is reservation.maxDuration: longer annotations are clamped.
	DefaultMaxDuration = 7 * 24 * time.Hour
	// DefaultMaxPerNamespace is reservation.maxPerNamespace: how many pod
	// identities of one namespace may hold a reservation in one network.
	// With a flannel node's /24 (253 addresses) and the kubelet's default of
	// 110 pods per node, one namespace can then never fill the pool with
	// reservations (110 + 32 leaves over 100 addresses for everyone else),
	// while a StatefulSet or DaemonSet that keeps a few IPs per node is far
	// below it.
	DefaultMaxPerNamespace = 32
	// DefaultRestoreReservation is the reservation a restored copy gets when
	// its parent has none, so the parent gets its IP back (checkpointd
	// --restore-reservation).
	DefaultRestoreReservation = "10m"
)

// checkpointd's defaults: its flags' values, which the shipped systemd unit
// (conf/checkpointd.service) sets again; a test compares the unit with them.
const (
	// DefaultKubeconfig is checkpointd's --kubeconfig: the kubelet's own, so
	// checkpointd acts with the node's identity.
	DefaultKubeconfig = "/etc/kubernetes/kubelet.conf"
	// DefaultCheckpointDir is checkpointd's --checkpoint-dir, on persistent disk.
	DefaultCheckpointDir = "/var/lib/stickyip/checkpoints"
	// DefaultStaticPodDir is checkpointd's --static-pod-dir: the kubelet's
	// staticPodPath as kubeadm sets it.
	DefaultStaticPodDir = "/etc/kubernetes/manifests"
	// DefaultVolumeDir is checkpointd's --volume-dir, on a tmpfs.
	DefaultVolumeDir = "/run/stickyip/checkpointd"
	// DefaultListenAddress is checkpointd's --listen-address (/healthz, /metrics).
	DefaultListenAddress = "127.0.0.1:9469"
)
