package ipamstore

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
)

// FlannelNetworks returns the names of the networks in confDir whose flannel
// plugin reads subnetFile (contract.DefaultFlannelSubnetFile when the plugin names none).
func FlannelNetworks(confDir, subnetFile string) ([]string, error) {
	c, err := ipam.ReadConf(confDir)
	if err != nil {
		return nil, err
	}
	return (&View{Conf: c}).FlannelNetworks(subnetFile), nil
}

// FlannelSubnetFile returns the lease file the flannel plugin of confDir's
// networks reads, as the plugin does: its subnetFile, contract.DefaultFlannelSubnetFile
// when it names none; "" when no network uses flannel. Networks naming
// different files are an error (checkpointd keeps one lease): the operator
// names the file with --flannel-subnet-file.
func FlannelSubnetFile(confDir string) (string, error) {
	nets, _, err := ipam.ReadConfDir(confDir)
	if err != nil {
		return "", err
	}
	var files, names []string
	for _, n := range nets {
		for _, p := range n.Plugins {
			if p.Type == "flannel" && !slices.Contains(files, flannelFile(p)) {
				files = append(files, flannelFile(p))
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

func flannelFile(p ipam.ConfPlugin) string {
	return filepath.Clean(cmp.Or(p.SubnetFile, contract.DefaultFlannelSubnetFile))
}
