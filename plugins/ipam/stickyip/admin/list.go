package admin

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/stickyip/stickyip/contract"
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
	DurationFrom string `json:"durationFrom,omitempty"`
	// Retention is how a recorded reservation ends: "statefulset" (it
	// follows StatefulSet) or "fixed" (Duration after the DEL: the pod or
	// its namespace asked for it, or no StatefulSet is known for it).
	Retention string `json:"retention,omitempty"`
	// StatefulSet is the StatefulSet the reservation follows, as
	// stickyip-controller last described it (why: what keeps it, and
	// what would end it).
	StatefulSet *reservation.StatefulSetRef `json:"statefulSet,omitempty"`
	// Keep says what would end the reservation, as the table's KEEP
	// column: "10m0s", "StatefulSet db: <the controller's account> (10m0s
	// once following stops)", "10m0s from <time>: <why> (StatefulSet db)".
	Keep        string     `json:"keep,omitempty"`
	Imported    bool       `json:"imported,omitempty"`
	AllocatedAt time.Time  `json:"allocatedAt"`
	ExpiresAt   *time.Time `json:"expiresAt,omitempty"`
	// DurationEndsAt, for a reservation its StatefulSet holds (which has no
	// expiresAt), is when its own duration ends: past it, it is the first
	// to give way to a new pod when the pool is full.
	DurationEndsAt  *time.Time `json:"durationEndsAt,omitempty"`
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
		keep := orDash(e.Keep)
		if e.Clamped {
			keep += " (clamped from " + e.RequestedDuration + ")"
		}
		if e.DurationFrom != "" {
			keep += " (" + e.DurationFrom + " default)"
		}
		expires := "-"
		switch {
		case e.ExpiresAt != nil:
			expires = fmt.Sprintf("%s (in %s)", e.ExpiresAt.Local().Format(time.RFC3339), e.ExpiresAt.Sub(now).Round(time.Second))
		case e.DurationEndsAt != nil:
			expires = fmt.Sprintf("not while retained (its duration ends %s, %s)", e.DurationEndsAt.Local().Format(time.RFC3339), ago(e.DurationEndsAt.Sub(now)))
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

// ago says when d from now is: "in 5m0s" or "5m0s ago".
func ago(d time.Duration) string {
	d = d.Round(time.Second)
	if d < 0 {
		return (-d).String() + " ago"
	}
	return "in " + d.String()
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
		e.Retention, e.Keep = retentionOf(r)
	}
	if r.StatefulSet != nil {
		w := *r.StatefulSet
		e.StatefulSet = &w
	}
	if r.RequestedDuration > 0 {
		e.RequestedDuration = r.RequestedDuration.String()
	}
	at := r.ExpiresAt
	switch {
	case r.Held():
		e.DurationEndsAt = &at
	case r.Timed():
		e.ExpiresAt = &at
	}
	return e
}

// retentionOf says how a record's reservation ends: "statefulset" or
// "fixed", and what would end it, in words: stickyip-controller's account
// for one its StatefulSet keeps.
func retentionOf(r *reservation.Record) (retention, keep string) {
	w := r.StatefulSet
	switch {
	case r.Follows() && w.Why != "":
		return "statefulset", fmt.Sprintf("StatefulSet %s: %s (%s once following stops)", w.Name, w.Why, r.Duration)
	case r.Follows():
		return "statefulset", fmt.Sprintf("while StatefulSet %s keeps the pod's volume claim, as stickyip-controller says (%s once following stops)", w.Name, r.Duration)
	case w != nil && !w.EndedAt.IsZero() && r.Retention != contract.RetentionFixed:
		why := w.Why
		if why == "" {
			why = "its StatefulSet no longer keeps it"
		}
		return "fixed", fmt.Sprintf("%s from %s: %s (StatefulSet %s)", r.Duration, w.EndedAt.UTC().Format(time.RFC3339), why, w.Name)
	case r.Retention == contract.RetentionFixed:
		return "fixed", r.Duration.String() + " (fixed)"
	}
	return "fixed", r.Duration.String()
}
