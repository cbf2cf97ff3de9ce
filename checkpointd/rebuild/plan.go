package rebuild

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
	"github.com/stickyip/stickyip/checkpointd/cri"
	"github.com/stickyip/stickyip/checkpointd/ipamstore"
	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
)

// defaultIfName is the interface the runtimes give a pod's primary
// network (containerd and CRI-O both): the interface of an address only the
// runtime's sandbox status shows.
const defaultIfName = "eth0"

// Sandbox is one sandbox the runtime lists, with what was read about it.
type Sandbox struct {
	cri.Sandbox
	// Status is the runtime's status of it; StatusErr says why it could
	// not be read.
	Status    cri.Status
	StatusErr error
	// Addrs are the addresses in its network namespace by interface (nil:
	// not read); AddrsErr says why not.
	Addrs    map[string][]netip.Addr
	AddrsErr error
}

// Sources is what the node knows alone.
type Sources struct {
	Sandboxes []Sandbox
	// Cache are the runtime's CNI result cache entries; CacheProblems the
	// files that could not be read.
	Cache         []contract.CNICacheEntry
	CacheProblems []error
	Checkpoints   []*checkpoint.Record
}

// Plan is what a rebuild writes, per network, and what it noted.
type Plan struct {
	Networks map[string]ipamstore.NetworkRebuild
	// Notes are disagreements between sources, assumptions and what could
	// not be placed (with the engine's own problems, the report's).
	Notes []string
	// Wait, when set, is why the store must not be rebuilt yet: a running
	// sandbox whose addresses no source shows.
	Wait string
}

// rank orders attachments: an address two sources show goes to the first.
type rank int

const (
	rankRunningSeen rank = iota // a ready sandbox, addresses read in its namespace
	rankRunning                 // a ready sandbox, addresses from the cache or the runtime
	rankStopped                 // a sandbox the runtime lists as not ready, whose DEL has not succeeded
	rankUnknown                 // a cache entry of a sandbox the runtime does not list
)

type ranked struct {
	network string
	rank    rank
	att     ipam.Attachment
}

// planner builds a Plan from Sources for the configured networks.
type planner struct {
	confs map[string]*ipam.Config
	names []string // sorted network names
	now   time.Time
	atts  []ranked
	notes []string
	wait  []string
	// unread are the errors of running sandboxes' namespaces that could
	// not be read (their CNI results stood in).
	unread []error
}

// MakePlan decides what to write from the node's sources (pure: every input
// is in its arguments). Per sandbox, the addresses in its network namespace
// are what it holds; the CNI result cache says which network, interface,
// pod arguments and annotations each came with; the runtime's status is
// the last resort. A running sandbox whose addresses nothing shows stops
// the plan (Wait).
func MakePlan(src Sources, confs map[string]*ipam.Config, now time.Time) Plan {
	p := &planner{confs: confs, names: slices.Sorted(maps.Keys(confs)), now: now}
	cache := map[string][]contract.CNICacheEntry{}
	for _, e := range src.Cache {
		if confs[e.Network] != nil {
			cache[e.ContainerID] = append(cache[e.ContainerID], e)
		}
	}
	listed := map[string]bool{}
	for _, sb := range src.Sandboxes {
		listed[sb.ID] = true
		if !sb.Status.HostNetwork {
			p.sandbox(sb, cache[sb.ID])
		}
	}
	for _, e := range src.Cache {
		if confs[e.Network] != nil && !listed[e.ContainerID] {
			p.add(e.Network, rankUnknown, fromCache(e, e.IPs, ""))
		}
	}
	for _, err := range src.CacheProblems {
		p.notes = append(p.notes, fmt.Sprintf("unreadable: %v (a sandbox the runtime lists is read from its namespace instead)", err))
	}
	if len(p.unread) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("%d running sandboxes' network namespaces not read (first: %v): their CNI results stand in", len(p.unread), p.unread[0]))
	}
	slices.SortStableFunc(p.atts, func(a, b ranked) int { return cmp.Compare(a.rank, b.rank) })
	out := Plan{Networks: map[string]ipamstore.NetworkRebuild{}, Notes: p.notes, Wait: strings.Join(p.wait, "; ")}
	for _, n := range p.names {
		out.Networks[n] = ipamstore.NetworkRebuild{}
	}
	for _, a := range p.atts {
		nr := out.Networks[a.network]
		nr.Attachments = append(nr.Attachments, a.att)
		out.Networks[a.network] = nr
	}
	return out
}

// sandbox plans the attachments of one sandbox the runtime lists, one per
// network and interface. A running sandbox holds every address a source
// shows for it: those in its namespace, its cached result's, and the
// runtime's status's (the primary interface's, taken as defaultIfName): an
// address two sources disagree on goes to the running sandbox. (A runtime
// whose DEL failed may keep the sandbox running with its interface gone
// and its cached result removed: CRI-O does; only its status still shows
// the address, which its retried DEL releases.) A stopped sandbox's
// namespace and status say nothing (the bridge plugin removes the interface
// before it asks the IPAM to release): its cached result, while its DEL has
// not succeeded, is what that DEL will release.
func (p *planner) sandbox(sb Sandbox, entries []contract.CNICacheEntry) {
	if !sb.Ready {
		for _, e := range entries {
			p.add(e.Network, rankStopped, fromCache(e, e.IPs, sb.Status.Netns))
		}
		return
	}
	r := rankRunning
	if sb.Addrs != nil {
		r = rankRunningSeen
	} else if sb.AddrsErr != nil {
		p.unread = append(p.unread, sb.AddrsErr)
	}
	atts := map[[2]string]*ipam.Attachment{} // by network and interface
	var order [][2]string
	put := func(network, ifname string, ips []netip.Addr, make func() ipam.Attachment) {
		k := [2]string{network, ifname}
		a, ok := atts[k]
		if !ok {
			aa := make()
			aa.IPs = nil
			a, atts[k] = &aa, &aa
			order = append(order, k)
		}
		for _, ip := range ips {
			if !slices.Contains(a.IPs, ip) {
				a.IPs = append(a.IPs, ip)
			}
		}
	}
	for _, e := range entries { // the namespace's addresses first: what the sandbox really has
		put(e.Network, e.IfName, p.inNetwork(e.Network, sb.Addrs[e.IfName]), func() ipam.Attachment { return fromCache(e, nil, sb.Status.Netns) })
		put(e.Network, e.IfName, p.inNetwork(e.Network, e.IPs), nil)
	}
	for _, ifname := range slices.Sorted(maps.Keys(sb.Addrs)) {
		for n, ips := range p.byNetwork(sb.Addrs[ifname]) {
			put(n, ifname, ips, func() ipam.Attachment { return fromRuntime(sb, ifname) })
		}
	}
	var extra []netip.Addr
	for n, ips := range p.byNetwork(sb.Status.IPs) {
		for _, ip := range ips {
			if !slices.ContainsFunc(order, func(k [2]string) bool { return slices.Contains(atts[k].IPs, ip) }) {
				extra = append(extra, ip)
				put(n, defaultIfName, []netip.Addr{ip}, func() ipam.Attachment { return fromRuntime(sb, defaultIfName) })
			}
		}
	}
	if len(extra) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("running sandbox %s (%s): %v shown only by the runtime's status, kept for it on %s",
			sb.ID, podOf(sb), extra, defaultIfName))
	}
	// Nothing shown while a source could not be read: the sandbox may hold
	// an address no source shows (a running sandbox on the pod network
	// has one; the runtime's status, when read, names it).
	if len(entries) == 0 && sb.Addrs == nil && (sb.StatusErr != nil || len(extra) == 0) {
		p.wait = append(p.wait, fmt.Sprintf("running sandbox %s (%s): no source shows its addresses (status: %v; network namespace: %v)",
			sb.ID, podOf(sb), sb.StatusErr, sb.AddrsErr))
		return
	}
	for _, k := range order {
		a := *atts[k]
		a.Running = true
		p.add(k[0], r, a)
	}
}

// byNetwork groups addresses by the network whose ranges hold them
// (addresses in none are not stickyip's).
func (p *planner) byNetwork(addrs []netip.Addr) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, ip := range addrs {
		if n := p.networkOf(ip); n != "" {
			out[n] = append(out[n], ip)
		}
	}
	return out
}

// fromRuntime is the attachment of sandbox sb on ifname as the runtime
// shows the pod: its metadata and annotations stand for the ADD's CNI_ARGS
// and annotations (the kubelet passes both from the same pod).
func fromRuntime(sb Sandbox, ifname string) ipam.Attachment {
	ann := sb.Status.Annotations
	if ann == nil {
		ann = sb.Annotations
	}
	return ipam.Attachment{
		ContainerID: sb.ID, IfName: ifname, Netns: sb.Status.Netns,
		Args:        ipam.PodArgs{Namespace: sb.Namespace, Name: sb.Name, UID: sb.UID, InfraContainerID: sb.ID},
		Annotations: ann, Since: sb.CreatedAt,
	}
}

func (p *planner) add(network string, r rank, a ipam.Attachment) {
	if len(a.IPs) > 0 {
		p.atts = append(p.atts, ranked{network: network, rank: r, att: a})
	}
}

// networkOf returns the first network (by name) whose ranges hold ip.
func (p *planner) networkOf(ip netip.Addr) string {
	for _, n := range p.names {
		if slices.ContainsFunc(p.confs[n].Ranges, func(rs ipam.RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) }) {
			return n
		}
	}
	return ""
}

// inNetwork returns the addresses of ips in network's ranges.
func (p *planner) inNetwork(network string, ips []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		if slices.ContainsFunc(p.confs[network].Ranges, func(rs ipam.RangeSet) bool { return rs.Contains(net.IP(ip.AsSlice())) }) {
			out = append(out, ip)
		}
	}
	return out
}

// fromCache is the attachment a cache entry shows, with ips (what its
// namespace holds, when read) and the sandbox's namespace path when the
// entry names none.
func fromCache(e contract.CNICacheEntry, ips []netip.Addr, netns string) ipam.Attachment {
	args := ipam.PodArgs{Namespace: e.Arg("K8S_POD_NAMESPACE"), Name: e.Arg("K8S_POD_NAME"), UID: e.Arg("K8S_POD_UID"),
		InfraContainerID: e.Arg("K8S_POD_INFRA_CONTAINER_ID")}
	if a, err := ipam.ParseArgs(joinArgs(e.Args)); err == nil {
		args = a
	}
	return ipam.Attachment{ContainerID: e.ContainerID, IfName: e.IfName, Netns: cmp.Or(e.Netns, netns),
		Args: args, Annotations: e.Annotations, IPs: ips, Since: e.Written}
}

// joinArgs is CNI_ARGS as the pairs were passed.
func joinArgs(pairs [][2]string) string {
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(p[0] + "=" + p[1])
	}
	return b.String()
}

func podOf(sb Sandbox) string {
	if of, ok := sb.Annotations[contract.AnnotationCheckpointOf]; ok {
		return sb.Namespace + "/" + sb.Name + ", a copy of " + of
	}
	return sb.Namespace + "/" + sb.Name
}
