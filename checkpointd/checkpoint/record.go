package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stickyip/stickyip/checkpointd/safefile"
	corev1 "k8s.io/api/core/v1"
)

// Format is the header value of every record file this package writes.
const Format = "stickyip.io/checkpoint/v1"

// Suffix is the file name suffix of record files.
const Suffix = ".ckpt"

// ErrNotFound is returned by Load when no record exists for the identity.
var ErrNotFound = errors.New("checkpoint not found")

// ErrCorrupt is wrapped by errors about records that fail verification.
var ErrCorrupt = safefile.ErrCorrupt

// Record is what checkpointd saves for one opted-in pod: the pod as the API
// server had it (status and server-managed metadata stripped) and the data of
// the secrets and configMaps its restored copy needs.
type Record struct {
	// Pod is the parent pod.
	Pod *corev1.Pod `json:"pod"`
	// Secrets holds the data of secrets referenced by the pod's volumes, by secret name.
	Secrets map[string]map[string][]byte `json:"secrets,omitempty"`
	// ConfigMaps holds the data of configMaps referenced by the pod's volumes and env,
	// by configMap name (binaryData is folded into the byte map).
	ConfigMaps map[string]map[string][]byte `json:"configMaps,omitempty"`
	// IPs are the pod's addresses (status.podIPs) when it was saved: a
	// store rebuild keeps them for the pod while it is not running.
	// Records of earlier versions have none.
	IPs []string `json:"ips,omitempty"`
	// SavedAt is when this content was first written.
	SavedAt time.Time `json:"savedAt"`
}

// ID returns the identity the record belongs to.
func (r *Record) ID() ID {
	if r.Pod == nil {
		return ID{}
	}
	return ID{Namespace: r.Pod.Namespace, Name: r.Pod.Name}
}

func sameContent(a, b *Record) bool {
	ac, bc := *a, *b
	ac.SavedAt, bc.SavedAt = time.Time{}, time.Time{}
	aj, err1 := json.Marshal(&ac)
	bj, err2 := json.Marshal(&bc)
	return err1 == nil && err2 == nil && bytes.Equal(aj, bj)
}

func decode(data []byte) (*Record, error) {
	payload, err := safefile.Unframe(Format, data)
	if err != nil {
		return nil, err
	}
	var rec Record
	if err := json.Unmarshal(payload, &rec); err != nil {
		return nil, fmt.Errorf("bad payload: %v: %w", err, ErrCorrupt)
	}
	if rec.Pod == nil {
		return nil, fmt.Errorf("no pod in payload: %w", ErrCorrupt)
	}
	return &rec, nil
}
