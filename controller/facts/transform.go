package facts

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Transform is an informer transform (cache.TransformFunc) that keeps, of
// pods, StatefulSets and Nodes, their facts. An object it has already
// transformed, and anything else (an informer's tombstone), is returned as
// it is: the informer may hand it the same object twice.
func Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return PodFrom(o), nil
	case *appsv1.StatefulSet:
		return StatefulSetFrom(o), nil
	case *corev1.Node:
		return NodeFrom(o), nil
	}
	return obj, nil
}
