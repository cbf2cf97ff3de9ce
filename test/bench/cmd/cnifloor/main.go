// Command cnifloor is the smallest CNI plugin built on the CNI library's
// skel, as stickyip and host-local are: skel.PluginMainFuncs reads the
// environment and stdin, checks the network config's name and version
// (encoding/json), calls the verb and, after ADD and DEL, checks CNI_NETNS
// (ns.CheckNetNS). Its ADD prints a fixed result, every other verb does
// nothing. `make bench` builds it as bin/stickyip is built and times it in
// workload 1 beside the Go floor: what any plugin on the CNI library pays
// before it reads its own configuration or keeps any state.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

const result = `{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]}` + "\n"

func main() {
	none := func(*skel.CmdArgs) error { return nil }
	add := func(*skel.CmdArgs) error {
		_, err := os.Stdout.WriteString(result)
		return err
	}
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: none, Check: none, GC: none, Status: none}, version.All, "cnifloor")
}
