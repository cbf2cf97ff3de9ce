package checkpoint

import (
	"errors"
	"fmt"
	"strings"
)

// ID is a pod identity: namespace and name.
type ID struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (id ID) String() string { return id.Namespace + "/" + id.Name }

// ParseID parses "namespace/name".
func ParseID(s string) (ID, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return ID{}, fmt.Errorf("invalid pod identity %q: want namespace/name", s)
	}
	return ID{Namespace: ns, Name: name}, nil
}

// Key returns "<namespace>_<name>", the form of id in every file and
// directory name checkpointd keeps ('_' is in neither part).
func (id ID) Key() string { return id.Namespace + "_" + id.Name }

// SplitKey splits Key's form; the caller validates the parts.
func SplitKey(s string) (ID, bool) {
	ns, name, ok := strings.Cut(s, "_")
	return ID{Namespace: ns, Name: name}, ok
}

// fileName returns the record file name of id.
func (id ID) fileName() string { return id.Key() + Suffix }

// File names of the static copies checkpointd writes in the kubelet's static
// pod directory: StaticPrefix + Key + StaticSuffix (a JSON manifest).
// Versions before JSON manifests wrote LegacyStaticSuffix (YAML); such a copy
// is still recognised as checkpointd's, kept while it is needed and removed
// like any other (never rewritten: the kubelet derives a static pod's UID
// from its file name, so a rename would restart the copy).
const (
	StaticPrefix       = "stickyip-checkpoint-"
	StaticSuffix       = ".json"
	LegacyStaticSuffix = ".yaml"
)

// StaticName returns the file name of id's static copy.
func (id ID) StaticName() string { return StaticPrefix + id.Key() + StaticSuffix }

// MaxIDLen bounds len(namespace)+len(name) of an identity checkpointd can
// keep: its longest file name, the static copy's
// "stickyip-checkpoint-<namespace>_<name>.json" (".yaml" before), must fit
// in the 255 bytes file systems allow. The API allows longer names (253 +
// 63); such pods are refused with ErrIDTooLong.
const MaxIDLen = 255 - len(StaticPrefix+"_"+StaticSuffix)

// ErrIDTooLong is wrapped by the error about an identity longer than MaxIDLen.
var ErrIDTooLong = errors.New("namespace and name too long for checkpointd's file names")

func (id ID) valid() error {
	for _, s := range []string{id.Namespace, id.Name} {
		if s == "" || strings.ContainsAny(s, "/_\x00") || s == "." || s == ".." {
			return fmt.Errorf("invalid pod identity %q", id.String())
		}
	}
	return id.CheckLen()
}

// CheckLen reports ErrIDTooLong for identities longer than MaxIDLen.
func (id ID) CheckLen() error {
	if n := len(id.Namespace) + len(id.Name); n > MaxIDLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrIDTooLong, n, MaxIDLen)
	}
	return nil
}
