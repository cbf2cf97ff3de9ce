package ipamstore

import (
	"path/filepath"

	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/subnetenv"
)

// FlannelNetworks returns the names of the networks in confDir whose flannel
// plugin reads subnetFile (subnetenv.DefaultPath when the plugin names none).
func FlannelNetworks(confDir, subnetFile string) ([]string, error) {
	nets, _, err := ipam.ReadConfDir(confDir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nets {
		for _, p := range n.Plugins {
			f := p.SubnetFile
			if f == "" {
				f = subnetenv.DefaultPath
			}
			if p.Type == "flannel" && filepath.Clean(f) == filepath.Clean(subnetFile) {
				out = append(out, n.Name)
				break
			}
		}
	}
	return out, nil
}
