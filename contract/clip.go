package contract

// ClipLen is how much of a value an error message quotes.
const ClipLen = 80

// Clip shortens s to at most n bytes (plus an ellipsis), so an error quoting
// hostile input stays readable. Every error message of both binaries that
// quotes input clips it with this.
func Clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
