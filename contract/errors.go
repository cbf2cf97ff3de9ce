package contract

import "errors"

// ErrInvalidAnnotation is wrapped by every parser error about an annotation
// value; the plugin turns it into CNI error 7 (invalid configuration).
var ErrInvalidAnnotation = errors.New("invalid annotation")

// clip shortens a value for an error message, so an error quoting hostile
// input stays readable.
func clip(s string) string {
	const n = 80
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
