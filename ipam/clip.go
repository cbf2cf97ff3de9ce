package ipam

// clip shortens a value for an error message.
func clip(s string) string { return clipTo(s, 80) }

// clipTo shortens s to at most n bytes (plus an ellipsis), so an error quoting
// hostile input stays readable.
func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
