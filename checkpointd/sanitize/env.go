package sanitize

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/stickyip/stickyip/checkpointd/checkpoint"
)

func inlineEnv(rec *checkpoint.Record, c *corev1.Container, warn func(string, ...any)) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			data, ok := rec.ConfigMaps[ef.ConfigMapRef.Name]
			if !ok {
				if isTrue(ef.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configMap %q was not saved with the checkpoint", ef.ConfigMapRef.Name)
			}
			for _, k := range sortedKeys(data) {
				name := ef.Prefix + k
				if len(validation.IsEnvVarName(name)) > 0 {
					continue // the kubelet skips invalid names too
				}
				env = append(env, corev1.EnvVar{Name: name, Value: string(data[k])})
			}
		case ef.SecretRef != nil:
			warn("container %q: envFrom secret %q dropped (secrets are never written into manifests)", c.Name, ef.SecretRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.SecretKeyRef != nil:
				warn("container %q: env %s from secret %q dropped (secrets are never written into manifests)", c.Name, e.Name, e.ValueFrom.SecretKeyRef.Name)
				continue
			case e.ValueFrom.ConfigMapKeyRef != nil:
				ref := e.ValueFrom.ConfigMapKeyRef
				v, ok := rec.ConfigMaps[ref.Name][ref.Key]
				if !ok {
					if isTrue(ref.Optional) {
						continue
					}
					return nil, fmt.Errorf("env %s: configMap %q key %q was not saved with the checkpoint", e.Name, ref.Name, ref.Key)
				}
				e = corev1.EnvVar{Name: e.Name, Value: string(v)}
			}
		}
		env = append(env, e)
	}
	return env, nil
}
