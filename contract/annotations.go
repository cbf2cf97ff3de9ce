package contract

// Pod annotations. The plugin receives them through the CNI capability
// io.kubernetes.cri.pod-annotations; checkpointd reads them from the API.
const (
	// AnnotationReservedDuration: how long to keep the pod's IP after its
	// sandbox is deleted. An integer is minutes (the OpenKruise form); a Go
	// duration ("90s", "1h30m") is also accepted; "0" means no reservation.
	// Parsed by ParseReservedDuration.
	AnnotationReservedDuration = "io.kubernetes.cri/reserved-ip-duration"

	// AnnotationIdentity names the identity the pod's reservation belongs to,
	// scoped to the pod's namespace, instead of the pod's name (for pods
	// without stable names). Parsed by ParseIdentity. The identity is
	// KeyedIdentity(value), never the pod named value: see IdentityKeyPrefix.
	AnnotationIdentity = "stickyip.io/identity"

	// AnnotationPlacement chooses how the placement hint (deploy/placement)
	// treats a re-created pod whose identity a node holds: PlacementPreferred
	// (the default) or PlacementRequired. Anything else is refused at pod
	// admission by deploy/placement (the stickyip-placement-annotation policy).
	AnnotationPlacement = "stickyip.io/placement"
	// PlacementPreferred: a preferred node affinity for the holding node.
	PlacementPreferred = "preferred"
	// PlacementRequired: a required node affinity for the holding node,
	// ANDed with the pod's own required terms.
	PlacementRequired = "required"

	// AnnotationDurationFrom says where a pod's AnnotationReservedDuration
	// (and AnnotationPlacement) came from when the pod did not carry it
	// itself: DurationFromNamespace (its namespace's LabelStatefulSets) or
	// DurationFromCluster (the install's default). Set by the
	// stickyip-statefulsets admission policy (deploy/placement), which also
	// removes it from any pod it did not set it on; the plugin records it
	// with the allocation and `stickyip list` shows it. Parsed by
	// ParseDurationFrom.
	AnnotationDurationFrom = "stickyip.io/reserved-ip-duration-from"
	// DurationFromNamespace: the duration is the namespace's LabelStatefulSets.
	DurationFromNamespace = "namespace"
	// DurationFromCluster: the duration is the cluster's default, set at install.
	DurationFromCluster = "cluster"

	// AnnotationRetention says how a pod's reservation ends:
	// RetentionWorkload (the default) or RetentionFixed. Parsed by
	// ParseRetention. The stickyip-statefulsets admission policy sets it to
	// RetentionFixed for a namespace (or cluster) setting ending in
	// "-fixed", on a pod that carries none of its own.
	AnnotationRetention = "stickyip.io/retention"
	// RetentionWorkload: a StatefulSet pod's reservation follows its
	// StatefulSet, as its volumes do (spec.persistentVolumeClaimRetentionPolicy:
	// kept through a scale-down with whenScaled Retain, released by it with
	// Delete; released with the StatefulSet with whenDeleted Delete, kept for
	// its duration from then with Retain); any other pod's is fixed.
	RetentionWorkload = "workload"
	// RetentionFixed: the reservation lasts its duration after the DEL,
	// whatever the pod's controller does (the former default).
	RetentionFixed = "fixed"

	// AnnotationIPs asks for specific addresses, one per range set,
	// comma-separated. Parsed by ParseIPs.
	AnnotationIPs = "stickyip.io/ips"

	// AnnotationCheckpoint opts a pod in to checkpointd ("true").
	AnnotationCheckpoint = "stickyip.io/checkpoint"
	// AnnotationBootstrapCheckpoint is the kubelet's former bootstrap-checkpoint opt-in, honoured.
	AnnotationBootstrapCheckpoint = "node.kubernetes.io/bootstrap-checkpoint"
	// AnnotationCoreOSCheckpoint is bootkube pod-checkpointer's opt-in, honoured.
	AnnotationCoreOSCheckpoint = "checkpointer.alpha.coreos.com/checkpoint"

	// AnnotationCheckpointOf is set by checkpointd on a restored static copy:
	// the parent's "namespace/name". The plugin honours it only on static
	// pods (AnnotationConfigSource = ConfigSourceFile). Parsed by ParseCheckpointOf.
	AnnotationCheckpointOf = "stickyip.io/checkpoint-of"
	// AnnotationCheckpointUID records the parent's UID on the static copy.
	AnnotationCheckpointUID = "stickyip.io/checkpoint-uid"

	// AnnotationConfigSource is set by the kubelet itself: ConfigSourceFile on
	// static pods from the manifest directory, "api" on API pods.
	AnnotationConfigSource = "kubernetes.io/config.source"
	// ConfigSourceFile is AnnotationConfigSource's value on static pods.
	ConfigSourceFile = "file"
	// AnnotationConfigMirror is set on mirror pods (the API view of a static pod).
	AnnotationConfigMirror = "kubernetes.io/config.mirror"
)

// LabelStatefulSets, on a Namespace, makes every StatefulSet pod created
// there without AnnotationReservedDuration of its own behave as if its
// template carried it: its value is the duration ("30", "90s", "1h30m";
// "0": none, which also opts the namespace out of the cluster's default),
// optionally followed by "-" and the placement mode ("30m-required", as
// AnnotationPlacement). deploy/placement's stickyip-statefulsets policy
// applies it; its stickyip-statefulsets-label policy refuses any other value.
const LabelStatefulSets = "stickyip.io/statefulsets"

// The values of a StatefulSet's spec.persistentVolumeClaimRetentionPolicy
// whenScaled and whenDeleted (apps/v1); absent means PolicyRetain.
const (
	PolicyRetain = "Retain"
	PolicyDelete = "Delete"
)

// OptInAnnotations are the annotations that opt a pod in to checkpointd when
// their value is "true".
var OptInAnnotations = []string{AnnotationCheckpoint, AnnotationBootstrapCheckpoint, AnnotationCoreOSCheckpoint}

// OptedIn reports whether annotations carry one of OptInAnnotations set to "true".
func OptedIn(annotations map[string]string) bool {
	for _, k := range OptInAnnotations {
		if annotations[k] == "true" {
			return true
		}
	}
	return false
}
