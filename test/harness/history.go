package harness

import (
	"regexp"
	"strings"
)

var (
	// issueRef is a reference to an issue of the project: the word issue
	// (or issues) and a number, or a number after a hash mark that follows
	// a space, a bracket or a comma. Another project's "owner/repo#N" or
	// "repo#N" is a citation, not history, and does not match.
	issueRef = regexp.MustCompile(`(?i)\bissues?\s+#?\d+|(?:^|[\s(\[,;])#\d+\b`)
	// hexRun is a run of 7 to 40 hexadecimal digits: a commit hash when it
	// holds both a digit and a letter.
	hexRun = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	// isoDate is an ISO date: year, month, day, joined by hyphens.
	isoDate = regexp.MustCompile(`\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b`)
)

// History returns what in text reads as project history — issue
// references, commit hashes and, with dates set, dates — which belongs to
// commit messages, not to pages or code comments.
func History(text string, dates bool) []string {
	var out []string
	out = append(out, issueRef.FindAllString(text, -1)...)
	for _, h := range hexRun.FindAllString(text, -1) {
		if strings.ContainsAny(h, "0123456789") && strings.ContainsAny(h, "abcdef") {
			out = append(out, h)
		}
	}
	if dates {
		out = append(out, isoDate.FindAllString(text, -1)...)
	}
	return out
}
