package admin

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/stickyip/stickyip/reservation"
)

// Entry is one line of "list --json".
type Entry struct {
	Network string `json:"network"`
	// DataDir is the store the record is in.
	DataDir     string `json:"dataDir"`
	IP          string `json:"ip"`
	State       string `json:"state"`
	ContainerID string `json:"containerID,omitempty"`
	IfName      string `json:"ifname,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	// Legacy: recorded before pod names and stickyip.io/identity keys were
	// told apart (store schema 2); the name answers to both.
	Legacy            bool   `json:"legacy,omitempty"`
	UID               string `json:"uid,omitempty"`
	Netns             string `json:"netns,omitempty"`
	Duration          string `json:"duration,omitempty"`
	RequestedDuration string `json:"requestedDuration,omitempty"`
	Clamped           bool   `json:"clamped"`
	// DurationFrom: the pod's reservation annotation was set by the
	// stickyip-statefulsets admission policy, from its namespace's default
	// ("namespace") or the cluster's ("cluster"); absent when the pod
	// carried it itself.
	DurationFrom    string     `json:"durationFrom,omitempty"`
	Imported        bool       `json:"imported,omitempty"`
	AllocatedAt     time.Time  `json:"allocatedAt"`
	ExpiresAt       *time.Time `json:"expiresAt,omitempty"`
	LastContainerID string     `json:"lastContainerID,omitempty"`
	// LastPod is namespace/name of the last holder of a cooling address:
	// until the cooling ends only that pod may ask for it.
	LastPod string `json:"lastPod,omitempty"`
}

func (t *tool) list(args []string) error {
	fs := t.flags("list")
	network := fs.String("network", "", "only this network")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	stores, err := t.stores()
	if err != nil {
		return err
	}
	entries := []Entry{}
	byStore := make([][]Entry, len(stores))
	for i, s := range stores {
		nets, err := s.networks(*network, len(stores) == 1)
		if err != nil {
			return err
		}
		for _, n := range nets {
			err := s.store().View(n, func(tx reservation.Txn) error {
				return tx.ForEach(func(r *reservation.Record) error {
					byStore[i] = append(byStore[i], entryOf(s.dir, n, r))
					return nil
				})
			})
			if err != nil {
				return inStore(s.dir, err)
			}
		}
		entries = append(entries, byStore[i]...)
	}
	if *asJSON {
		return t.printJSON(entries)
	}
	for i, s := range stores {
		if len(stores) > 1 { // each store named, then its table
			if i > 0 {
				fmt.Fprintln(t.stdout)
			}
			fmt.Fprintln(t.stdout, s.heading())
		}
		if err := t.listTable(byStore[i]); err != nil {
			return err
		}
	}
	return nil
}

// listTable prints entries as list's table.
func (t *tool) listTable(entries []Entry) error {
	w := tabwriter.NewWriter(t.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NETWORK\tIP\tSTATE\tPOD\tIFNAME\tCONTAINER\tKEEP\tEXPIRES")
	now := time.Now()
	for _, e := range entries {
		pod := "-"
		if e.Name != "" {
			pod = e.Namespace + "/" + e.Name
			if e.Legacy {
				pod += " (legacy)"
			}
		} else if e.LastPod != "" {
			pod = "(was " + e.LastPod + ")"
		}
		keep := orDash(e.Duration)
		if e.Clamped {
			keep += " (clamped from " + e.RequestedDuration + ")"
		}
		if e.DurationFrom != "" {
			keep += " (" + e.DurationFrom + " default)"
		}
		expires := "-"
		if e.ExpiresAt != nil {
			expires = fmt.Sprintf("%s (in %s)", e.ExpiresAt.Local().Format(time.RFC3339), e.ExpiresAt.Sub(now).Round(time.Second))
		}
		cid := e.ContainerID
		if len(cid) > 12 {
			cid = cid[:12]
		}
		if e.Imported {
			cid += " (host-local)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Network, e.IP, e.State, pod, orDash(e.IfName), orDash(cid), keep, expires)
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func entryOf(dataDir, network string, r *reservation.Record) Entry {
	e := Entry{
		Network: network, DataDir: dataDir, IP: r.IP.String(), State: string(r.State), ContainerID: r.ContainerID,
		IfName: r.IfName, Namespace: r.Identity.Namespace, Name: r.Identity.Name, UID: r.UID, Netns: r.Netns,
		Legacy: r.Identity.Legacy, Clamped: r.Clamped, Imported: r.Imported, AllocatedAt: r.AllocatedAt, LastContainerID: r.LastContainerID,
	}
	if r.Identity.IfName != "" {
		e.IfName = r.Identity.IfName
	}
	if !r.LastIdentity.IsZero() {
		e.LastPod = r.LastIdentity.Pod()
	}
	if r.Duration > 0 {
		e.Duration, e.DurationFrom = r.Duration.String(), r.DurationFrom
	}
	if r.RequestedDuration > 0 {
		e.RequestedDuration = r.RequestedDuration.String()
	}
	if r.Timed() {
		at := r.ExpiresAt
		e.ExpiresAt = &at
	}
	return e
}
