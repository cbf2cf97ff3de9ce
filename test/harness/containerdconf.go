package harness

// The configuration file of a private containerd: every path, socket and
// shared default private, in the config version of the release that runs.

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

func (c *Containerd) config() string {
	if c.Major >= 2 {
		return c.configV4()
	}
	return c.configV2()
}

// configV4 is the configuration of containerd 2.x (config version 4, CRI
// split into io.containerd.cri.v1.{runtime,images} and grpc.v1.cri). Every
// path, socket and shared default of the machine's own containerd
// (/run/containerd/*, /etc/containerd/conf.d, the NRI socket, CDI spec dirs)
// is private or off, without deprecated keys (containerd reports those in
// CRI Status).
func (c *Containerd) configV4() string {
	runc, err := exec.LookPath("runc")
	if err != nil {
		runc = "runc"
	}
	return fmt.Sprintf(`version = 4
root = %q
state = %q
temp = %q
imports = []
disabled_plugins = ["io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]

[plugins.'io.containerd.server.v1.grpc']
  address = %q

[plugins.'io.containerd.server.v1.ttrpc']
  address = %q

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.internal.v1.opt']
  path = %q

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [%q]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
    max_conf_num = 1
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        Root = %q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
%s
`, c.Root, c.State, filepath.Join(c.cfg.Dir, "tmp"), c.Address, c.Address+".ttrpc",
		filepath.Join(c.cfg.Dir, "opt"), c.shimSockets, c.cfg.SandboxImage, filepath.Join(c.cfg.Dir, "cdi"),
		c.cfg.CNIBinDir, c.cfg.CNIConfDir, runc, filepath.Join(c.State, "runc"), c.cfg.ExtraTOML)
}

// configV2 is the configuration of the legacy containerd 1.6 (Debian 12's).
func (c *Containerd) configV2() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
%s
`, c.Root, c.State, c.Address, c.Address+".ttrpc", filepath.Join(c.cfg.Dir, "opt"), c.cfg.SandboxImage,
		c.cfg.CNIBinDir, c.cfg.CNIConfDir, filepath.Join(c.State, "runc"), c.cfg.ExtraTOML)
}
