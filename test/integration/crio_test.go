//go:build integration

package integration

import (
	"slices"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// TestCRIOCNICalls: CRI-O (built by scripts/install-deps.sh) with the CNI
// 1.1.0 bridge conflist. What it calls, seen by the call recorder: STATUS
// until the network is ready and GC once, both at start (GC with the pods it
// restored as valid attachments); ADD then CHECK for each sandbox; DEL when
// it stops; the pod's identity and annotations on every pod call. CRI
// Status answers from the start-up probe, without calling STATUS again. And
// stickyip's reservation works through it: a re-created pod gets its IP back.
func TestCRIOCNICalls(t *testing.T) {
	n := newNode(t, bridgeConf, "stickyip")
	harness.RequireCRIO(t)
	rec := n.addRecorder(t)
	crio := harness.StartCRIO(t, harness.CRIOConfig{Node: n.ns, CNIBinDir: n.binDir, CNIConfDir: n.confDir})
	cri := crio.CRI(t)

	if gcs := rec.calls(t, "GC"); len(gcs) != 1 || len(gcs[0].ValidAttachments) != 0 {
		t.Fatalf("CRI-O %s at its first start: GC calls %+v; want one, with no valid attachment", crio.Version, gcs)
	}
	statuses := len(rec.calls(t, "STATUS"))
	if statuses == 0 {
		t.Fatalf("CRI-O %s reported the network ready without a CNI STATUS", crio.Version)
	}

	ann := map[string]string{annDuration: "10", "example.com/team": "storage"}
	db := harness.Pod{Name: "db", Namespace: "default", UID: "db-uid", Annotations: ann}
	dbID, dbIPs := runPod(t, cri, db)
	add := rec.only(t, "ADD", dbID)
	requirePodCall(t, add, db, dbID, ann)
	requirePodCall(t, rec.only(t, "CHECK", dbID), db, dbID, ann)
	web := harness.Pod{Name: "web", Namespace: "default", UID: "web-uid"}
	webID, _ := runPod(t, cri, web)

	for range 3 {
		requireNetworkReady(t, cri, true, "")
	}
	if got := len(rec.calls(t, "STATUS")); got != statuses {
		t.Fatalf("CRI-O %s called STATUS %d more times for 3 CRI Status calls; it answers from its start-up probe", crio.Version, got-statuses)
	}

	// A restart of the service: the pods keep running, and CRI-O calls GC
	// with them as the valid attachments.
	crio.Stop(t)
	crio.Start(t)
	cri = crio.CRI(t)
	gcs := rec.calls(t, "GC")
	if len(gcs) != 2 {
		t.Fatalf("CRI-O %s: %d GC calls after a restart, want 2 (one per start)", crio.Version, len(gcs))
	}
	var valid []string
	for _, a := range gcs[1].ValidAttachments {
		valid = append(valid, a.ContainerID+"/"+a.IfName)
	}
	if !sameSet(valid, []string{dbID + "/eth0", webID + "/eth0"}) {
		t.Fatalf("GC after the restart declared %v valid, want the running sandboxes %s and %s", valid, dbID, webID)
	}

	deletePod(t, cri, dbID)
	rec.requireDELs(t, db, dbID, ann, add.Netns)
	if got := ipsIn(entriesFor(n.list(t), "default", "db"), "reserved"); !sameSet(got, dbIPs) {
		t.Fatalf("after CRI-O's DEL, default/db has %v reserved, want %v", got, dbIPs)
	}
	db.UID = "db-uid-2"
	if _, ips := runPod(t, cri, db); !slices.Equal(ips, dbIPs) {
		t.Fatalf("db re-created through CRI-O got %v, want its reserved %v", ips, dbIPs)
	}
	t.Logf("CRI-O %s called: %s", crio.Version, rec.summary(t))
	n.check(t)
}
