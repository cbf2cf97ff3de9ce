package ipam

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
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
