package contract

import "errors"

// ErrInvalidAnnotation is wrapped by every parser error about an annotation
// value; the plugin turns it into CNI error 7 (invalid configuration).
var ErrInvalidAnnotation = errors.New("invalid annotation")
