// Package harness runs the real components of a Kubernetes node for stickyip's
// root-only tests: network namespaces, a private containerd driving the CNI
// chain, a locally built pause image, a small CRI client, and cnitool.
//
// Everything a test starts is registered with t.Cleanup and removed even when
// the test fails: processes are ended by PID, namespaces by name.
//
// The API, in the order a test uses it:
//
//	harness.RequireRoot(t)                      // skip unless root with the tools installed
//	node := harness.NewNetns(t, "node")         // the fake node: everything runs inside it
//	bin := harness.CNIBinDir(t, stickyipPath)   // upstream plugins + extra binaries, one dir
//	ctd := harness.StartContainerd(t, harness.ContainerdConfig{
//	        Node: node, CNIBinDir: bin, CNIConfDir: confDir})
//	                                            // pause image built and imported, CRI ready
//	cri := ctd.CRI(t)                           // CRI client over ctd's socket
//	id, err := cri.RunPod(ctx, harness.Pod{Name: "web", Namespace: "default", UID: "u1"})
//	st, err := cri.PodStatus(ctx, id)           // st.IPs, st.PID
//	ctd.Crash(t)                                // kill runtime + sandboxes, wipe state (a reboot)
//	ctd.Restart(t)                              // start again on the same root
//
// cnitool (scenarios without a runtime) runs inside the node namespace:
//
//	tool := harness.CNITool{Node: node, BinDir: bin, ConfDir: confDir}
//	res, err := tool.Add(t, "cbr0", podNetns, harness.CNIArgs{...})
//
// Binaries come from scripts/install-deps.sh (project-local _output/) and from
// Debian packages (containerd, runc, ctr, iptables, ip, nsenter, unshare).
package harness
