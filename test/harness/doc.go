// Package harness runs the real components of a Kubernetes node for stickyip's
// root-only tests: network namespaces, a private containerd driving the CNI
// chain, a locally built pause image, a small CRI client, and cnitool.
//
// Everything a test starts is registered with t.Cleanup and removed even when
// the test fails: processes are ended by PID, namespaces by name, mounts under
// the test's directories are unmounted.
//
// The API, in the order a test uses it:
//
//	harness.RequireRoot(t)                      // skip unless root with the tools installed (fail: STICKYIP_STRICT)
//	node := harness.NewNetns(t, "node")         // the fake node: the CNI chain runs inside it
//	bin := harness.CNIBinDir(t, "bin/stickyip") // upstream plugins + extra binaries, one dir
//	ctd := harness.StartContainerd(t, harness.ContainerdConfig{
//	        Node: node, CNIBinDir: bin, CNIConfDir: confDir})
//	                                            // pause image built and imported, CRI ready
//	cri := ctd.CRI(t)                           // CRI client over ctd.Address
//	id, err := cri.RunPod(ctx, harness.Pod{Name: "web", Namespace: "default", UID: "u1",
//	        Annotations: map[string]string{...}})
//	st, err := cri.PodStatus(ctx, id)           // st.IPs; /proc/<st.PID>/ns/net is the pod netns
//	addrs, err := harness.Addrs(fmt.Sprintf("/proc/%d/ns/net", st.PID), "eth0")
//	err = cri.DeletePod(ctx, id)                // StopPodSandbox + RemovePodSandbox (CNI DEL)
//	ctd.Crash(t)                                // power loss: kill runtime + sandboxes, wipe state
//	ctd.Stop(t)                                 // systemctl stop: SIGTERM, the pods keep running
//	ctd.Restart(t)                              // start again on the same root (after Crash or Stop)
//
// cnitool (scenarios without a runtime) runs inside the node namespace, one
// pod netns per sandbox (cnitool derives the container ID from its path):
//
//	tool := harness.CNITool{Node: node, BinDir: bin, ConfDir: confDir}
//	pod := harness.NewNetns(t, "pod")
//	res, err := tool.Add(t, "cbr0", pod.Path, harness.PodArgs{Namespace: "default", Name: "web", UID: "u1"})
//	err = tool.Del("cbr0", pod.Path, args); err = tool.GC("cbr0")
//
// containerd runs in the host's mount namespace (as on a node) and the node's
// network namespace; its root, state, socket, runc root and pod netns mounts
// live under ContainerdConfig.Dir. Another component talking CRI to it (a
// kubelet) must be stopped before the containerd cleanup runs, i.e. registered
// with t.Cleanup after StartContainerd. The kubelet garbage-collects sandboxes
// it does not know: keep kubelet tests and bare-CRI tests on separate instances.
//
// StartCRIO runs a private CRI-O the same way (StartCRIO, CRIO.CRI). The CNI
// call recorder (BuildRecorder, RecorderPlugin, RecordedCalls), chained after
// the real plugins, shows what a runtime calls and with what.
//
// Every tier runs the plugin binary itself the same way (plugin.go) and builds
// its network configuration the same way (netconf.go):
//
//	p := &harness.Plugin{Path: "bin/stickyip"}          // Netns: run inside a node namespace
//	conf := harness.NetConf("1.1.0", "net1", harness.IPAM("stickyip", dataDir, []string{"10.1.0.0/24"}))
//	o := p.CNI(harness.CNICall{Command: "ADD", ContainerID: "c1", Netns: pod.Path, IfName: "eth0",
//	        Args: harness.PodCNIArgs("default", "web", "uid", "c1"),
//	        Stdin: harness.Encode(harness.WithAnnotations(conf, annotations))})
//	o.OK(); o.Result.Addrs(); o.Err.Code; o.Elapsed       // the process as seen from outside
//	entries := p.List(t, dataDir)                          // the operator tool
//
// Benchmarks use CreateNetns (no testing.TB) and the same runner.
//
// Binaries come from scripts/install-deps.sh (project-local _output/, see
// UpstreamBinDir, CNIToolPath, ContainerdBinDir and CRIOBinDir: containerd
// 2.3.7 by default, Debian's 1.6 with STICKYIP_CONTAINERD=debian) and from
// Debian packages (runc, conmon, iptables, ip, nsenter).
package harness
