package deploy

import "embed"

// Placement holds deploy/placement: the RBAC, the index policy, the
// placement hint, the pod policy and the namespace opt-in operators apply
// with `kubectl apply -k deploy/placement`.
//
//go:embed placement/*.yaml placement/Kustomization
var Placement embed.FS
