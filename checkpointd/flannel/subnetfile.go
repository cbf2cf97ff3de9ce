package flannel

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
)

// SubnetFileFromCNI is the --flannel-subnet-file value (the default) that
// takes the lease file from the flannel plugin's own configuration.
const SubnetFileFromCNI = "auto"

// SubnetFile resolves --flannel-subnet-file: SubnetFileFromCNI takes the
// file the flannel CNI plugin of confDir reads (its subnetFile, or the
// plugin's default), so checkpointd keeps the lease the plugin actually
// uses; "" (no flannel network) keeps none. Any other value is an
// operator's override and is returned as is.
func SubnetFile(flag, confDir string) (string, error) {
	if flag != SubnetFileFromCNI {
		return flag, nil
	}
	if confDir == "" {
		return "", fmt.Errorf("--flannel-subnet-file=%s needs --cni-conf-dir: name the file, or \"\" to keep none", SubnetFileFromCNI)
	}
	f, err := conflistSubnetFile(confDir)
	if err != nil {
		return "", fmt.Errorf("--flannel-subnet-file=%s: %w", SubnetFileFromCNI, err)
	}
	return f, nil
}

// conflistSubnetFile returns the lease file the flannel plugin of
// confDir's networks reads, as the plugin does: its subnetFile,
// contract.DefaultFlannelSubnetFile when it names none; "" when no network
// uses flannel. Networks naming different files are an error (checkpointd
// keeps one lease): the operator names the file with --flannel-subnet-file.
func conflistSubnetFile(confDir string) (string, error) {
	nets, _, err := ipam.ReadConfDir(confDir)
	if err != nil {
		return "", err
	}
	var files, names []string
	for _, n := range nets {
		for _, p := range n.Plugins {
			if p.Type == "flannel" && !slices.Contains(files, pluginFile(p)) {
				files = append(files, pluginFile(p))
				names = append(names, n.Name)
			}
		}
	}
	switch len(files) {
	case 0:
		return "", nil
	case 1:
		return files[0], nil
	}
	return "", fmt.Errorf("the flannel networks of %s read different subnet files (%v of networks %v): name one with --flannel-subnet-file", confDir, files, names)
}

// Networks returns the networks of the CNI config directory c (as read
// once by ipam.ReadConf) whose flannel plugin reads subnetFile: those whose
// addresses the lease gives (nil without a directory read).
func Networks(c *ipam.Conf, subnetFile string) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, n := range c.Networks {
		for _, p := range n.Plugins {
			if p.Type == "flannel" && pluginFile(p) == filepath.Clean(subnetFile) {
				out = append(out, n.Name)
				break
			}
		}
	}
	return out
}

// pluginFile is the lease file a flannel plugin entry reads.
func pluginFile(p ipam.ConfPlugin) string {
	return filepath.Clean(cmp.Or(p.SubnetFile, contract.DefaultFlannelSubnetFile))
}
