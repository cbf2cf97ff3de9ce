// Package flannel keeps a flannel node's subnet lease across reboots, so pods
// checkpointd restores while the API server is away still get a network.
//
// flanneld writes the node's lease to /run/flannel/subnet.env, on tmpfs, and
// with --kube-subnet-mgr only once it reaches the API server. After a reboot
// with the API server away the file is missing, and the flannel CNI plugin
// fails every ADD ("open /run/flannel/subnet.env: no such file or
// directory"). The Keeper:
//
//   - saves every lease flanneld writes to persistent disk (checksummed, in
//     checkpointd's checkpoint directory);
//   - while flanneld has not written one this boot and the API server has
//     been unreachable for the grace period (flanneld cannot get a lease, and
//     checkpointd restores pods that need a network), puts the saved lease
//     back, never over an existing file (the write is a link(2), which fails
//     when the file exists), and only when it still matches the IPAM (the
//     address stickyip allocated last on the flannel network lies in its
//     subnet, see Check and IPAMCheck). While the API server answers, flanneld is about
//     to write the current lease, which may differ: nothing is put back;
//   - recognises the file it put back by its inode, kept on tmpfs for this
//     boot: flanneld writes a new file and renames it into place, so once the
//     inode differs flanneld owns the file again, even with the same content,
//     and its lease is the one saved.
//
// It never invents a subnet: what it puts back is a copy of a file flanneld
// wrote on this node.
//
// The package also reads what the CNI configuration says of flannel
// (subnetfile.go): which lease file the flannel plugin reads (SubnetFile,
// --flannel-subnet-file) and which networks that lease gives addresses to
// (Networks).
package flannel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stickyip/stickyip/checkpointd/safefile"
	"github.com/stickyip/stickyip/contract"
)

// SavedFileName is the saved lease's name in the checkpoint directory.
const SavedFileName = "flannel-subnet.env"

// MarkerFileName is, in the per-boot directory (tmpfs), the identity (inode)
// of the file the Keeper put back this boot. It has no '_' (see boot.FileName).
const MarkerFileName = "flannel-lease"

// savedFormat is the header format of the saved lease (safefile.Frame).
const savedFormat = "stickyip.io/flannel-lease/v1"

// maxLeaseSize bounds what is read as a lease.
const maxLeaseSize = 4096

// Outcome says what a Step did.
type Outcome string

// Outcomes of Step.
const (
	None     Outcome = "none"     // no file, and nothing saved or nothing to put back now
	Saved    Outcome = "saved"    // flanneld wrote a new lease; saved
	Current  Outcome = "current"  // flanneld's file is the saved one
	Ours     Outcome = "ours"     // the file is the one put back this boot
	Restored Outcome = "restored" // the saved lease was put back
	Refused  Outcome = "refused"  // the saved lease no longer matches the IPAM
)

// Keeper saves and puts back the lease.
type Keeper struct {
	// SubnetFile is flanneld's file, the one the flannel CNI plugin reads.
	SubnetFile string
	// SavedFile is the saved copy on persistent disk.
	SavedFile string
	// MarkerFile is on tmpfs: the identity (device:inode) of the file put
	// back this boot.
	MarkerFile string
	// Check, when set, must accept a saved lease before it is put back.
	Check func(contract.FlannelLease) error
	Log   *slog.Logger
}

// Step does one round: save flanneld's lease, or, when putBack (the API
// server has been unreachable for the grace period) and flanneld has not
// written one, put the saved one back.
func (k *Keeper) Step(putBack bool) (Outcome, error) {
	cur, err := readLimited(k.SubnetFile)
	switch {
	case err == nil:
		return k.saveCurrent(cur)
	case errors.Is(err, os.ErrNotExist) && putBack:
		return k.putBack()
	case errors.Is(err, os.ErrNotExist):
		return None, nil
	default:
		return None, fmt.Errorf("read %s: %w", k.SubnetFile, err)
	}
}

func (k *Keeper) saveCurrent(cur []byte) (Outcome, error) {
	marker, _ := os.ReadFile(k.MarkerFile)
	if len(marker) > 0 && string(marker) == fileID(k.SubnetFile) {
		return Ours, nil
	}
	if len(marker) > 0 {
		if err := os.Remove(k.MarkerFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return None, err
		}
		k.Log.Info("flanneld wrote its own subnet lease: it owns the file again", "file", k.SubnetFile)
	}
	lease, err := contract.ParseFlannelLease(cur)
	if err != nil {
		return None, fmt.Errorf("%s not saved: %w", k.SubnetFile, err)
	}
	if saved, err := k.readSaved(); err == nil && bytes.Equal(saved, cur) {
		return Current, nil
	}
	if err := os.MkdirAll(filepath.Dir(k.SavedFile), 0o700); err != nil {
		return None, err
	}
	if err := safefile.Write(k.SavedFile, safefile.Frame(savedFormat, cur), 0o600); err != nil {
		return None, fmt.Errorf("save flannel lease: %w", err)
	}
	k.Log.Info("flannel subnet lease saved for the next boot", "subnets", lease.String(), "file", k.SavedFile)
	return Saved, nil
}

func (k *Keeper) putBack() (Outcome, error) {
	saved, err := k.readSaved()
	if errors.Is(err, os.ErrNotExist) {
		return None, nil
	}
	if err != nil {
		return None, fmt.Errorf("saved flannel lease %s: %w", k.SavedFile, err)
	}
	lease, err := contract.ParseFlannelLease(saved)
	if err != nil {
		return None, fmt.Errorf("saved flannel lease %s: %w", k.SavedFile, err)
	}
	if k.Check != nil {
		if err := k.Check(lease); err != nil {
			return Refused, fmt.Errorf("saved flannel lease %s (%s) not put back: %w", k.SavedFile, lease, err)
		}
	}
	dir := filepath.Dir(k.SubnetFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return None, err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(k.SubnetFile)+".")
	if err != nil {
		return None, err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(saved)
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Sync(), tmp.Close()); err != nil {
		return None, err
	}
	// Write the marker first: a crash between the two leaves a marker for a
	// file that is not there, which the next round treats like no file.
	if err := safefile.Write(k.MarkerFile, []byte(fileID(tmp.Name())), 0o600); err != nil {
		return None, fmt.Errorf("record the lease put back: %w", err)
	}
	// link(2) never replaces: if flanneld wrote its file meanwhile, it wins.
	if err := os.Link(tmp.Name(), k.SubnetFile); err != nil {
		if errors.Is(err, os.ErrExist) {
			return None, nil
		}
		return None, fmt.Errorf("put back flannel lease: %w", err)
	}
	if err := safefile.SyncDir(dir); err != nil {
		return None, err
	}
	k.Log.Warn("flanneld has not written a subnet lease this boot: the lease of the last boot was put back so pods get a network",
		"file", k.SubnetFile, "subnets", lease.String())
	return Restored, nil
}

func (k *Keeper) readSaved() ([]byte, error) {
	data, err := readLimited(k.SavedFile)
	if err != nil {
		return nil, err
	}
	return safefile.Unframe(savedFormat, data)
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 4*maxLeaseSize))
}

// fileID names the file at path by device and inode ("" when it cannot be read).
func fileID(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
