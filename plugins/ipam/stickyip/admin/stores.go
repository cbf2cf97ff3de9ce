package admin

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stickyip/stickyip/contract"
	"github.com/stickyip/stickyip/ipam"
	"github.com/stickyip/stickyip/plugins/ipam/stickyip/datadir"
	"github.com/stickyip/stickyip/reservation/boltstore"
)

// defaultDataDir is the store read when nothing names one (a variable for
// the tests, which must not read the host's).
var defaultDataDir = contract.DefaultDataDir

// dirFlag is --data-dir: a directory, and whether the operator named it
// (the flag, or $STICKYIP_DATA_DIR).
type dirFlag struct {
	dir string
	set bool
}

func (d *dirFlag) String() string { return d.dir }

func (d *dirFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty directory")
	}
	d.dir, d.set = s, true
	return nil
}

// storeDir is one IPAM store a command works on: its data directory and
// the configured networks that keep their records there (none when the
// operator named the directory, or when no network uses stickyip).
type storeDir struct {
	dir  string
	nets []ipam.NetworkStore
}

// configured reports whether the CNI configuration keeps network's records
// in this store.
func (s storeDir) configured(network string) bool {
	return slices.ContainsFunc(s.nets, func(n ipam.NetworkStore) bool { return n.Network == network })
}

// heading names the store and, when the CNI configuration led to it, its
// networks and their files.
func (s storeDir) heading() string {
	var nets []string
	for _, n := range s.nets {
		nets = append(nets, n.Network+": "+n.File)
	}
	if len(nets) == 0 {
		return s.dir
	}
	return fmt.Sprintf("%s (%s)", s.dir, strings.Join(nets, ", "))
}

// label names network in messages: with its store when the command covers
// several.
func (s storeDir) label(network string, several bool) string {
	if several {
		return network + " (" + s.dir + ")"
	}
	return network
}

// store opens the directory's store as the plugin does (datadir.Open).
func (s storeDir) store() *boltstore.Store { return datadir.Open(s.dir, 0) }

// stores returns the stores a command works on. --data-dir (or
// $STICKYIP_DATA_DIR) wins: that one store. Otherwise the CNI configuration
// decides, as the plugin finds its store: the data directory of every
// network in --cni-conf-dir whose IPAM is stickyip, each once, in network
// name order; with none there (no stickyip network, or a conflist switched
// back to another IPAM while the store stays), the default directory, and
// stderr says so.
func (t *tool) stores() ([]storeDir, error) {
	if t.dataDir.set {
		return []storeDir{{dir: t.dataDir.dir}}, nil
	}
	nets, problems, err := ipam.NetworkStores(t.confDir)
	if err != nil {
		return nil, err
	}
	for _, p := range problems {
		fmt.Fprintln(t.stderr, "stickyip: skipped:", p)
	}
	var out []storeDir
	for _, n := range nets {
		i := slices.IndexFunc(out, func(s storeDir) bool { return s.dir == n.DataDir })
		if i < 0 {
			out = append(out, storeDir{dir: n.DataDir})
			i = len(out) - 1
		}
		out[i].nets = append(out[i].nets, n)
	}
	if len(out) == 0 {
		fmt.Fprintf(t.stderr, "stickyip: no network in %s uses stickyip; reading %s, the default data directory (--data-dir names another)\n",
			t.confDir, defaultDataDir)
		out = []storeDir{{dir: defaultDataDir}}
	}
	return out, nil
}

// networks returns the networks of store s a command covers: every
// network the store holds; with only, that network if the store holds it,
// the configuration keeps it there, or s is the command's one store.
func (s storeDir) networks(only string, one bool) ([]string, error) {
	names, err := s.store().Networks()
	if err != nil {
		return nil, inStore(s.dir, err)
	}
	if only != "" {
		if one || slices.Contains(names, only) || s.configured(only) {
			return []string{only}, nil
		}
		return nil, nil
	}
	return names, nil
}

// storeError is an error of the store in dir: Run names it and gives the
// hint for that store.
type storeError struct {
	dir string
	err error
}

func (e *storeError) Error() string { return e.dir + ": " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// inStore marks err (if any) as the store's in dir.
func inStore(dir string, err error) error {
	var se *storeError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return &storeError{dir: dir, err: err}
}

// failedStore returns the store an error is about, else def.
func failedStore(err error, def string) string {
	var se *storeError
	if errors.As(err, &se) {
		return se.dir
	}
	return def
}

// sameDir reports whether two directory names are one directory.
func sameDir(a, b string) bool { return filepath.Clean(a) == filepath.Clean(b) }
