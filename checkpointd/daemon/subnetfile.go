package daemon

import (
	"fmt"

	"github.com/stickyip/stickyip/checkpointd/flannel"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
)

// SubnetFile resolves --flannel-subnet-file: flannel.SubnetFileFromCNI
// takes the file the flannel CNI plugin of confDir reads (its subnetFile, or
// the plugin's default), so checkpointd keeps the lease the plugin actually
// uses; "" (no flannel network) keeps none. Any other value is an operator's
// override and is returned as is.
func SubnetFile(flag, confDir string) (string, error) {
	if flag != flannel.SubnetFileFromCNI {
		return flag, nil
	}
	if confDir == "" {
		return "", fmt.Errorf("--flannel-subnet-file=%s needs --cni-conf-dir: name the file, or \"\" to keep none", flannel.SubnetFileFromCNI)
	}
	f, err := ipamstore.FlannelSubnetFile(confDir)
	if err != nil {
		return "", fmt.Errorf("--flannel-subnet-file=%s: %w", flannel.SubnetFileFromCNI, err)
	}
	return f, nil
}
