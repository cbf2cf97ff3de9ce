package sanitize

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stickyip/stickyip/checkpointd/podspec"
	"github.com/stickyip/stickyip/contract"
)

// ErrUnsupported is wrapped by errors about pods that cannot run without an API server.
var ErrUnsupported = errors.New("pod cannot be restored without the API server")

// OptedIn reports whether the pod carries one of the opt-in annotations with value "true".
func OptedIn(pod *corev1.Pod) bool { return contract.OptedIn(pod.Annotations) }

// IsCopy reports whether the pod is a static or mirror pod, or a checkpoint copy:
// such pods are never parents.
func IsCopy(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[contract.AnnotationCheckpointOf]; ok {
		return true
	}
	if _, ok := pod.Annotations[contract.AnnotationConfigMirror]; ok {
		return true
	}
	if src, ok := pod.Annotations[contract.AnnotationConfigSource]; ok && src != "api" {
		return true
	}
	return false
}

// Check reports whether pod can be restored at all (see ErrUnsupported).
func Check(pod *corev1.Pod) error {
	if needs := podspec.NeedsAPIServer(pod); len(needs) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(needs, "; "), ErrUnsupported)
	}
	return nil
}
