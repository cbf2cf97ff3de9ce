package harness

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stickyip/stickyip/plugins/ipam/stickyip/admin"
)

// HeldAddress is an address a ready sandbox of the runtime holds.
type HeldAddress struct {
	IP      string // without a prefix length
	Sandbox string // the sandbox's ID: the CNI container ID
	Pod     string // namespace/name
}

// ReadyAddresses returns every address the runtime's ready sandboxes hold,
// as their status reports them: what runs on the node, whoever started it.
func ReadyAddresses(ctx context.Context, c *CRIClient) ([]HeldAddress, error) {
	pods, err := c.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	var out []HeldAddress
	for _, p := range pods {
		st, err := c.PodStatus(ctx, p.Id)
		if status.Code(err) == codes.NotFound {
			continue // removed since the list: it holds nothing any more
		}
		if err != nil {
			return nil, err
		}
		if !st.Ready {
			continue
		}
		for _, ip := range st.IPs {
			ip, _, _ = strings.Cut(ip, "/")
			out = append(out, HeldAddress{IP: ip, Sandbox: p.Id, Pod: p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()})
		}
	}
	return out, nil
}

// AddressProblems checks the addresses the runtime's ready sandboxes hold
// (held) against each other and against store (`stickyip list`, every
// network): each is held by one ready sandbox only, and the store has it
// allocated to that very sandbox — neither free, nor reserved or cooling
// for another pod, nor allocated to another sandbox, so no ADD can hand it
// out again. It returns one line per problem (nil: none). An address in no
// record of the store counts as a problem: a sandbox runs with it while the
// store would hand it out.
func AddressProblems(held []HeldAddress, store []admin.Entry) []string {
	var problems []string
	holder := map[string]HeldAddress{}
	for _, h := range held {
		if o, ok := holder[h.IP]; ok && o.Sandbox != h.Sandbox {
			problems = append(problems, fmt.Sprintf("%s is held by two ready sandboxes: %s (%s) and %s (%s)", h.IP, o.Sandbox, o.Pod, h.Sandbox, h.Pod))
			continue
		}
		holder[h.IP] = h
	}
	for _, ip := range slices.Sorted(maps.Keys(holder)) {
		h := holder[ip]
		i := slices.IndexFunc(store, func(e admin.Entry) bool { return e.IP == ip })
		switch {
		case i < 0:
			problems = append(problems, fmt.Sprintf("%s, which ready sandbox %s (%s) holds, is in no record of the store: free to hand out", ip, h.Sandbox, h.Pod))
		case store[i].State != "allocated" || store[i].ContainerID != h.Sandbox:
			e := store[i]
			problems = append(problems, fmt.Sprintf("%s, which ready sandbox %s (%s) holds, is %s in the store (container %q, pod %s/%s)",
				ip, h.Sandbox, h.Pod, e.State, e.ContainerID, e.Namespace, e.Name))
		}
	}
	return problems
}

// CheckAddresses is AddressProblems for the sandboxes of the runtime at c
// that are ready both before and after store() lists the store: a sandbox
// ready at both reads was ready in between (a stopped sandbox is never
// ready again), so its DEL, which the runtime runs once it stopped, cannot
// have come between them; pods started and deleted meanwhile do not make
// the check flaky. It returns the addresses checked.
func CheckAddresses(ctx context.Context, c *CRIClient, store func() []admin.Entry) ([]HeldAddress, []string, error) {
	before, err := ReadyAddresses(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	entries := store()
	after, err := ReadyAddresses(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var held []HeldAddress
	for _, h := range before {
		if slices.Contains(after, h) {
			held = append(held, h)
		}
	}
	return held, AddressProblems(held, entries), nil
}
