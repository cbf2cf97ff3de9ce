package ipam

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/reservation"
)

// TestAddRequest: the ADD request is built from the config alone — the
// sandbox's limits, the pod's identity and reservation, the requested
// addresses — and a reservation without a pod identity is dropped.
func TestAddRequest(t *testing.T) {
	load := func(ann, cniArgs string) *Config {
		c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"stickyip","subnet":"10.2.0.0/24"},
			"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{`+ann+`}}}`), cniArgs)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pod := "K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0;K8S_POD_UID=u1;IP=10.2.0.9"
	keep := `"io.kubernetes.cri/reserved-ip-duration":"1h","stickyip.io/identity":"db"`

	req, err := load(keep, pod).AddRequest("c1", "eth0", "/run/netns/c1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	if req.ContainerID != "c1" || req.IfName != "eth0" || req.Netns != "/run/netns/c1" || req.UID != "u1" ||
		req.Identity.Pod() != "prod/identity:db" || req.Identity.IfName != "eth0" || req.PodName != "db-0" ||
		req.Duration != time.Hour || len(req.Requested) != 1 || req.Requested[0].String() != "10.2.0.9" {
		t.Fatalf("request %+v", req)
	}
	if req, err := load(keep, "").AddRequest("c1", "eth0", "", quiet); err != nil || !req.Identity.IsZero() || req.Duration != 0 {
		t.Fatalf("no pod arguments: request %+v, err %v; want no identity and no reservation", req, err)
	}
	for _, tc := range []struct{ id, ifname, want string }{
		{strings.Repeat("c", 257), "eth0", "CNI_CONTAINERID"},
		{"c1", strings.Repeat("e", 16), "CNI_IFNAME"},
	} {
		if _, err := load("", pod).AddRequest(tc.id, tc.ifname, "", quiet); !errors.Is(err, ErrInvalidArgs) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s too long: err %v, want ErrInvalidArgs naming it", tc.want, err)
		}
	}
}

// TestAddRequestDurationFrom: where the reservation annotation came from
// (set by the stickyip-statefulsets admission policy) is recorded with a
// reservation, ignored without one, and a value the policy never writes is
// refused naming the annotation.
func TestAddRequestDurationFrom(t *testing.T) {
	add := func(ann string) (AddRequest, error) { return addRequestWith(t, ann) }
	for _, tc := range []struct{ ann, want string }{
		{`"io.kubernetes.cri/reserved-ip-duration":"10","stickyip.io/reserved-ip-duration-from":"namespace"`, "namespace"},
		{`"io.kubernetes.cri/reserved-ip-duration":"1h","stickyip.io/reserved-ip-duration-from":"cluster"`, "cluster"},
		{`"io.kubernetes.cri/reserved-ip-duration":"1h"`, ""},
		{`"io.kubernetes.cri/reserved-ip-duration":"0","stickyip.io/reserved-ip-duration-from":"namespace"`, ""},
		{`"stickyip.io/reserved-ip-duration-from":"namespace"`, ""},
	} {
		req, err := add(tc.ann)
		if err != nil || req.DurationFrom != tc.want {
			t.Errorf("{%s}: DurationFrom %q, err %v; want %q", tc.ann, req.DurationFrom, err, tc.want)
		}
	}
	_, err := add(`"io.kubernetes.cri/reserved-ip-duration":"10","stickyip.io/reserved-ip-duration-from":"pod"`)
	if !errors.Is(err, contract.ErrInvalidAnnotation) || !strings.Contains(err.Error(), contract.AnnotationDurationFrom) {
		t.Errorf("a value the policy never writes: err %v, want one naming %s", err, contract.AnnotationDurationFrom)
	}
}

// TestDurationFromKeptWithTheReservation: the record remembers where its
// duration came from through the ADD and the DEL that turns it into a
// reservation (what `stickyip list` shows).
func TestDurationFromKeptWithTheReservation(t *testing.T) {
	w := newWorld(t, v4Small)
	req := AddRequest{ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/c1", UID: "u1", Duration: 10 * time.Minute,
		RequestedDuration: 10 * time.Minute, DurationFrom: contract.DurationFromNamespace,
		Identity: reservation.Identity{Namespace: "prod", Name: "db-0", IfName: "eth0"}}
	if err := w.store.Update("net1", func(tx reservation.Txn) error { _, err := w.eng.Add(tx, req); return err }); err != nil {
		t.Fatal(err)
	}
	w.del("c1")
	recs := w.records()
	if len(recs) != 1 || recs[0].State != reservation.Reserved || recs[0].DurationFrom != contract.DurationFromNamespace {
		t.Fatalf("records after DEL: %+v; want one reservation from the namespace default", recs)
	}
}

// TestAddRequestRetention: stickyip.io/retention: fixed is recorded with a
// reservation (workload, the default, records nothing), ignored without
// one, and any other value is refused naming the annotation (CNI error 7).
func TestAddRequestRetention(t *testing.T) {
	add := func(ann string) (AddRequest, error) { return addRequestWith(t, ann) }
	for _, tc := range []struct{ ann, want string }{
		{`"io.kubernetes.cri/reserved-ip-duration":"10","stickyip.io/retention":"fixed"`, contract.RetentionFixed},
		{`"io.kubernetes.cri/reserved-ip-duration":"10","stickyip.io/retention":"workload"`, ""},
		{`"io.kubernetes.cri/reserved-ip-duration":"10"`, ""},
		{`"io.kubernetes.cri/reserved-ip-duration":"0","stickyip.io/retention":"fixed"`, ""},
	} {
		req, err := add(tc.ann)
		if err != nil || req.Retention != tc.want {
			t.Errorf("{%s}: Retention %q, err %v; want %q", tc.ann, req.Retention, err, tc.want)
		}
	}
	for _, bad := range []string{"Fixed", "", "statefulset", "fixed "} {
		_, err := add(`"io.kubernetes.cri/reserved-ip-duration":"10","stickyip.io/retention":"` + bad + `"`)
		if !errors.Is(err, contract.ErrInvalidAnnotation) || !strings.Contains(err.Error(), contract.AnnotationRetention) {
			t.Errorf("stickyip.io/retention %q: err %v, want one naming the annotation", bad, err)
		}
	}
}

// addRequestWith builds the AddRequest of pod prod/db-0 whose annotations
// are ann (JSON members).
func addRequestWith(t *testing.T, ann string) (AddRequest, error) {
	t.Helper()
	c, err := LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"stickyip","subnet":"10.2.0.0/24"},
		"runtimeConfig":{"io.kubernetes.cri.pod-annotations":{`+ann+`}}}`), "K8S_POD_NAMESPACE=prod;K8S_POD_NAME=db-0;K8S_POD_UID=u1")
	if err != nil {
		t.Fatal(err)
	}
	return c.AddRequest("c1", "eth0", "", slog.New(slog.DiscardHandler))
}
