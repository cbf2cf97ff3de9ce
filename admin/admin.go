// Package admin is the operator tool: the stickyip binary run from a shell.
package admin

import (
	"fmt"
	"io"
)

// Run runs the operator tool with args and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "not yet")
	return 2
}
