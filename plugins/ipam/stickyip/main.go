// Command stickyip is a CNI IPAM plugin, a drop-in alternative to host-local
// that keeps a deleted pod's addresses reserved for the duration its
// io.kubernetes.cri/reserved-ip-duration annotation asks for. Run from a shell
// (no CNI_COMMAND) it is the operator tool for the same store.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
)

func main() {
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(admin.Run(os.Args[1:], os.Stdout, os.Stderr))
	}
	skel.PluginMainFuncs(cniFuncs, supportedVersions, about)
}

var (
	cniFuncs = skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus}
	// Every version libcni knows, as host-local: results are converted to the
	// conflist's version by the CNI library (types/020 for 0.1.0 and 0.2.0).
	supportedVersions = version.All
	about             = "CNI stickyip IPAM plugin " + contract.Version + " (run \"stickyip help\" for the operator tool)"
)
