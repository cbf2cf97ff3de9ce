//go:build integration

package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/test/harness"
)

// Scenario 1: cnitool + the flannel conflist. A pod with the reservation
// annotation gets its IP back when re-created (new container ID, new netns);
// a pod without it does not keep its IP; the reserved IP is never given to
// another pod meanwhile.
func TestCNIToolReservation(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	const reserve = 10 * time.Minute
	db := harness.PodArgs{Namespace: "default", Name: "db", UID: "db-1",
		Annotations: map[string]string{annDuration: reserve.String()}}
	web := harness.PodArgs{Namespace: "default", Name: "web", UID: "web-1"}

	dbNS := n.podNetns(t, "db")
	dbIPs := n.add(t, dbNS, db)
	webNS := n.podNetns(t, "web")
	webIPs := n.add(t, webNS, web)
	if len(dbIPs) != 1 || len(webIPs) != 1 || !strings.HasPrefix(dbIPs[0], "10.244.1.") || dbIPs[0] == webIPs[0] {
		t.Fatalf("first ADDs: db %v, web %v; want one distinct IP each in %s", dbIPs, webIPs, flannelSubnet)
	}
	dbIP, webIP := dbIPs[0], webIPs[0]
	if addrs, err := harness.Addrs(dbNS.Path, "eth0"); err != nil || !slices.Contains(stripMasks(addrs), dbIP) {
		t.Fatalf("db's eth0 has %v (%v), want %s", addrs, err, dbIP)
	}
	rows := entriesFor(n.list(t), "default", "db")
	if len(rows) != 1 || rows[0].State != "allocated" || rows[0].IP != dbIP || rows[0].Duration != reserve.String() ||
		rows[0].ContainerID != harness.CNIToolContainerID(dbNS.Path) {
		t.Fatalf("stickyip list for default/db after ADD: %+v; want allocated %s, duration %s, container %s",
			rows, dbIP, reserve, harness.CNIToolContainerID(dbNS.Path))
	}

	// Delete both pods: the runtime DELs, then the netns goes.
	n.del(t, dbNS, db)
	n.del(t, webNS, web)
	dbNS.Delete()
	webNS.Delete()

	rows = entriesFor(n.list(t), "default", "db")
	if len(rows) != 1 || rows[0].State != "reserved" || rows[0].IP != dbIP || rows[0].ExpiresAt == nil {
		t.Fatalf("stickyip list for default/db after DEL: %+v; want %s reserved with expiresAt", rows, dbIP)
	}
	if rows := entriesFor(n.list(t), "default", "web"); len(rows) != 0 {
		t.Fatalf("stickyip list still shows default/web (no annotation) after DEL: %+v", rows)
	}

	// Meanwhile another pod asking for the reserved IP is refused; the IP of
	// the pod without annotation is not reserved, but cools down
	// (reservation.reuseDelay): until then only default/web may ask for it.
	thief := harness.PodArgs{Namespace: "default", Name: "thief", UID: "thief-1", Extra: []string{"IP=" + dbIP}}
	thiefNS := n.podNetns(t, "thief")
	if _, err := n.tool.Add(t, n.net, thiefNS.Path, thief); err == nil || !strings.Contains(err.Error(), "default/db") {
		t.Fatalf("ADD asking for db's reserved IP %s: err %v; want a refusal naming default/db", dbIP, err)
	}
	n.tool.Del(n.net, thiefNS.Path, thief) // as a runtime cleans up a failed ADD
	other := harness.PodArgs{Namespace: "default", Name: "other", UID: "other-1", Extra: []string{"IP=" + webIP}}
	otherNS := n.podNetns(t, "other")
	if _, err := n.tool.Add(t, n.net, otherNS.Path, other); err == nil || !strings.Contains(err.Error(), "only default/web") {
		t.Fatalf("ADD asking for web's released, cooling IP %s: err %v; want a refusal naming default/web", webIP, err)
	}
	n.tool.Del(n.net, otherNS.Path, other)
	// Dynamic allocations skip the reserved IP too.
	for i := range 3 {
		p := harness.PodArgs{Namespace: "default", Name: fmt.Sprintf("filler-%d", i), UID: fmt.Sprintf("filler-%d", i)}
		if got := n.add(t, n.podNetns(t, "filler"), p); slices.Contains(got, dbIP) {
			t.Fatalf("pod %s/%s got db's reserved IP %s", p.Namespace, p.Name, dbIP)
		}
	}

	// web re-created does not get its old IP back: it was not reserved, and
	// the allocator skips a cooling address while others are free.
	web2 := harness.PodArgs{Namespace: "default", Name: "web", UID: "web-2"}
	if got := n.add(t, n.podNetns(t, "web"), web2); slices.Contains(got, webIP) {
		t.Fatalf("re-created default/web got %v, its old IP %s was not kept for it", got, webIP)
	}

	// db re-created: new netns, new container ID, new UID, same IP.
	db2 := harness.PodArgs{Namespace: "default", Name: "db", UID: "db-2",
		Annotations: map[string]string{annDuration: reserve.String()}}
	db2NS := n.podNetns(t, "db")
	if got := n.add(t, db2NS, db2); !slices.Equal(got, []string{dbIP}) {
		t.Fatalf("re-created default/db got %v, want its reserved IP %s", got, dbIP)
	}
	if addrs, err := harness.Addrs(db2NS.Path, "eth0"); err != nil || !slices.Contains(stripMasks(addrs), dbIP) {
		t.Fatalf("re-created db's eth0 has %v (%v), want %s", addrs, err, dbIP)
	}
	n.check(t)
}

// Scenario 1, expiry: while reserved, the IP is refused to another pod
// naming its holder; once the reservation has run out (its time moved
// back, as the clock would move it), it is handed out again and the
// holder leaves the list.
func TestCNIToolReservationExpires(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	const reserve = time.Hour // the refusal is judged long before it ends
	job := harness.PodArgs{Namespace: "default", Name: "job", UID: "job-1",
		Annotations: map[string]string{annDuration: reserve.String()}}
	ns := n.podNetns(t, "job")
	ip := n.add(t, ns, job)[0]
	n.del(t, ns, job)
	ns.Delete()

	early := harness.PodArgs{Namespace: "default", Name: "early", UID: "early-1", Extra: []string{"IP=" + ip}}
	earlyNS := n.podNetns(t, "early")
	if _, err := n.tool.Add(t, n.net, earlyNS.Path, early); err == nil || !strings.Contains(err.Error(), "default/job") {
		t.Fatalf("ADD asking for %s while reserved for default/job: err %v; want a refusal naming default/job", ip, err)
	}
	n.tool.Del(n.net, earlyNS.Path, early)

	n.expire(t, ip)
	late := harness.PodArgs{Namespace: "default", Name: "late", UID: "late-1", Extra: []string{"IP=" + ip}}
	if got := n.add(t, n.podNetns(t, "late"), late); !slices.Equal(got, []string{ip}) {
		t.Fatalf("after the reservation expired, ADD asking for %s got %v", ip, got)
	}
	if rows := entriesFor(n.list(t), "default", "job"); len(rows) != 0 {
		t.Fatalf("stickyip list still shows default/job after its reservation expired: %+v", rows)
	}
	n.check(t)
}

// Scenario 1, annotation forms: an integer is minutes, a Go duration is
// accepted, anything else fails the ADD naming the annotation and the value.
func TestCNIToolAnnotationForms(t *testing.T) {
	n := newNode(t, flannelConf, "stickyip")
	tests := []struct {
		name, value, wantDuration, wantErr string
	}{
		{name: "minutes", value: "5", wantDuration: "5m0s"},
		{name: "go-duration", value: "1h30m", wantDuration: "1h30m0s"},
		{name: "zero", value: "0", wantDuration: ""}, // no reservation: list omits the duration
		{name: "garbage", value: "soon", wantErr: "soon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := harness.PodArgs{Namespace: "ann", Name: tt.name, UID: tt.name,
				Annotations: map[string]string{annDuration: tt.value}}
			ns := n.podNetns(t, "ann")
			res, err := n.tool.Add(t, n.net, ns.Path, p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), annDuration) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ADD with %s=%q: err %v; want an error naming the annotation and the value", annDuration, tt.value, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ADD with %s=%q: %v", annDuration, tt.value, err)
			}
			rows := entriesFor(n.list(t), "ann", tt.name)
			if len(rows) != 1 || rows[0].IP != res.Addrs()[0] || rows[0].Duration != tt.wantDuration {
				t.Fatalf("stickyip list for ann/%s: %+v; want duration %s", tt.name, rows, tt.wantDuration)
			}
		})
	}
}
