package state

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReplacementOf(t *testing.T) {
	yes, no := true, false
	secs := func(s int64) *int64 { return &s }
	owned := func(apiVersion, kind string, controller *bool) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "x", UID: "u", Controller: controller}}
	}
	// What the DefaultTolerationSeconds admission plugin adds.
	defaults := []corev1.Toleration{
		{Key: TaintNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(300)},
		{Key: TaintUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(300)},
	}
	rs := owned("apps/v1", "ReplicaSet", &yes)
	for _, tc := range []struct {
		name        string
		owners      []metav1.OwnerReference
		tolerations []corev1.Toleration
		never       bool
		after       time.Duration
	}{
		{"bare pod", nil, nil, true, 0},
		{"bare pod with a short toleration", nil, []corev1.Toleration{{Key: TaintUnreachable, Operator: corev1.TolerationOpExists, TolerationSeconds: secs(5)}}, true, 0},
		{"StatefulSet", owned("apps/v1", "StatefulSet", &yes), defaults, true, 0},
		{"DaemonSet", owned("apps/v1", "DaemonSet", &yes), defaults, true, 0},
		{"a StatefulSet of another API group is an unknown kind", owned("apps.kruise.io/v1beta1", "StatefulSet", &yes), defaults, false, 300 * time.Second},
		{"StatefulSet reference that is not the controller", owned("apps/v1", "StatefulSet", &no), defaults, false, 300 * time.Second},
		{"ReplicaSet, admission defaults", rs, defaults, false, 300 * time.Second},
		{"ReplicaSet, no toleration: replaced at once", rs, nil, false, 0},
		{"ReplicaSet, only unreachable tolerated: not-ready evicts at once", rs, defaults[1:], false, 0},
		{"ReplicaSet, only not-ready tolerated: unreachable evicts at once", rs, defaults[:1], false, 0},
		{"a toleration of another taint (Exists) does not count", rs, []corev1.Toleration{
			{Key: "example.com/other", Operator: corev1.TolerationOpExists, TolerationSeconds: secs(600)}}, false, 0},
		{"a toleration of another taint (Equal) does not count", rs, []corev1.Toleration{
			{Key: "example.com/other", Operator: corev1.TolerationOpEqual, TolerationSeconds: secs(600)}}, false, 0},
		{"ReplicaSet, shorter not-ready wins", rs, []corev1.Toleration{
			{Key: TaintNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs(20)},
			defaults[1]}, false, 20 * time.Second},
		{"ReplicaSet, the first matching toleration counts, a later forever one does not", rs, []corev1.Toleration{
			{Key: TaintUnreachable, Operator: corev1.TolerationOpExists, TolerationSeconds: secs(7)},
			{Operator: corev1.TolerationOpExists}}, false, 7 * time.Second},
		{"ReplicaSet tolerating every taint forever", rs, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, true, 0},
		{"ReplicaSet tolerating both forever (Equal, empty value)", rs, []corev1.Toleration{
			{Key: TaintUnreachable, Effect: corev1.TaintEffectNoExecute}, {Key: TaintNotReady, Operator: corev1.TolerationOpEqual}}, true, 0},
		{"NoSchedule toleration does not count", rs, []corev1.Toleration{
			{Key: TaintUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: TaintNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, false, 0},
		{"a value never matches the taints, which have none", rs, []corev1.Toleration{
			{Key: TaintUnreachable, Value: "x"}, {Key: TaintNotReady, Value: "x"}}, false, 0},
		{"negative tolerationSeconds: at once", rs, []corev1.Toleration{
			{Key: TaintUnreachable, Operator: corev1.TolerationOpExists, TolerationSeconds: secs(-5)},
			{Key: TaintNotReady, Operator: corev1.TolerationOpExists}}, false, 0},
		{"Job", owned("batch/v1", "Job", &yes), defaults, false, 300 * time.Second},
		{"unknown controller kind", owned("example.com/v1", "Thing", &yes), defaults, false, 300 * time.Second},
		{"unknown kind tolerating forever", owned("example.com/v1", "Thing", &yes), []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, true, 0},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tc.owners}, Spec: corev1.PodSpec{Tolerations: tc.tolerations}}
		got := ReplacementOf(pod)
		if got.Never != tc.never || (!tc.never && got.After != tc.after) || got.Why == "" {
			t.Errorf("%s: ReplacementOf = %+v, want never=%t after=%s", tc.name, got, tc.never, tc.after)
		}
	}
}
