package rebuild

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
)

// planConfs is one network, net1 on 10.9.0.0/24.
func planConfs(t *testing.T) map[string]*ipam.Config {
	t.Helper()
	c, err := ipam.LoadConfig([]byte(`{"cniVersion":"1.0.0","name":"net1","ipam":{"type":"stickyip","ranges":[[{"subnet":"10.9.0.0/24"}]]}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*ipam.Config{"net1": c}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func ready(id, name string) Sandbox {
	return Sandbox{Sandbox: cri.Sandbox{ID: id, Namespace: "default", Name: name, UID: "uid-" + name, Ready: true}}
}

func cached(id, name string, ips ...string) contract.CNICacheEntry {
	return contract.CNICacheEntry{Network: "net1", ContainerID: id, IfName: "eth0", IPs: addrs(ips...),
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"K8S_POD_UID", "uid-" + name}}}
}

// attachments is the plan's net1 in the order the rebuild gives addresses:
// "container:pod:ips" each.
func attachments(p Plan) string {
	var out []string
	for _, a := range p.Networks["net1"].Attachments {
		out = append(out, fmt.Sprintf("%s:%s/%s:%v", a.ContainerID, a.Args.Namespace, a.Args.Name, a.IPs))
	}
	return strings.Join(out, " ")
}

// TestMakePlan: which sandbox an address two sources show goes to (the
// first attachment), and what the plan notes, source by source.
func TestMakePlan(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		src     func() Sources
		want    string // attachments
		note    string // a note the plan must have ("" none)
		notNote string // a note it must not have
	}{{
		name: "the sandbox whose namespace was read comes first",
		src: func() Sources {
			seen := ready("c-seen", "seen")
			seen.Addrs = map[string][]netip.Addr{"eth0": addrs("10.9.0.7")}
			other := ready("c-other", "other")
			other.AddrsErr = errors.New("no permission")
			return Sources{Sandboxes: []Sandbox{other, seen}, Cache: []contract.CNICacheEntry{cached("c-other", "other", "10.9.0.7"), cached("c-seen", "seen", "10.9.0.7")}}
		},
		want: "c-seen:default/seen:[10.9.0.7] c-other:default/other:[10.9.0.7]",
		note: "1 running sandboxes' network namespaces not read (first: no permission): their CNI results stand in",
	}, {
		name: "an address only the runtime's status shows is kept, and said",
		src: func() Sources {
			sb := ready("c1", "web")
			sb.Addrs = map[string][]netip.Addr{}
			sb.Status.IPs = addrs("10.9.0.8")
			return Sources{Sandboxes: []Sandbox{sb}}
		},
		want: "c1:default/web:[10.9.0.8]",
		note: "running sandbox c1 (default/web): [10.9.0.8] shown only by the runtime's status, kept for it on eth0",
	}, {
		name: "an address the namespace shows too is not said",
		src: func() Sources {
			sb := ready("c1", "web")
			sb.Addrs = map[string][]netip.Addr{"eth0": addrs("10.9.0.8")}
			sb.Status.IPs = addrs("10.9.0.8")
			return Sources{Sandboxes: []Sandbox{sb}}
		},
		want:    "c1:default/web:[10.9.0.8]",
		notNote: "shown only by the runtime's status",
	}, {
		name: "a stopped sandbox's cached result without addresses holds nothing",
		src: func() Sources {
			sb := ready("c1", "web")
			sb.Ready = false
			return Sources{Sandboxes: []Sandbox{sb}, Cache: []contract.CNICacheEntry{cached("c1", "web")}}
		},
		want: "",
	}, {
		name: "CNI_ARGS that do not parse still give the pod",
		src: func() Sources {
			e := cached("c1", "web", "10.9.0.9")
			e.Args = append([][2]string{{"", "x"}}, e.Args...) // a pair without a key
			return Sources{Cache: []contract.CNICacheEntry{e}}
		},
		want: "c1:default/web:[10.9.0.9]",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := MakePlan(tc.src(), planConfs(t), now)
			notes := strings.Join(p.Notes, "\n")
			if got := attachments(p); got != tc.want || !strings.Contains(notes, tc.note) || tc.notNote != "" && strings.Contains(notes, tc.notNote) {
				t.Fatalf("attachments %q, notes:\n%s\nwant %q, a note %q, none %q", got, notes, tc.want, tc.note, tc.notNote)
			}
		})
	}
}

// TestMakePlanAnnotations: an attachment the runtime alone shows carries
// the annotations the sandbox was created with (a reservation annotation
// among them); the runtime's list stands in when its status has none.
func TestMakePlanAnnotations(t *testing.T) {
	for _, status := range []map[string]string{nil, {"io.kubernetes.cri/reserved-ip-duration": "30"}} {
		sb := ready("c1", "web")
		sb.Annotations = map[string]string{"io.kubernetes.cri/reserved-ip-duration": "10"}
		sb.Status.Annotations = status
		sb.Addrs = map[string][]netip.Addr{"eth0": addrs("10.9.0.8")}
		p := MakePlan(Sources{Sandboxes: []Sandbox{sb}}, planConfs(t), time.Now())
		want := sb.Annotations
		if status != nil {
			want = status
		}
		atts := p.Networks["net1"].Attachments
		if len(atts) != 1 || fmt.Sprint(atts[0].Annotations) != fmt.Sprint(want) {
			t.Errorf("status annotations %v: attachments %+v, want annotations %v", status, atts, want)
		}
	}
}
