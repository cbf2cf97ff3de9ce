package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// path is the user's path: the README and the pages that take a user from
// nothing to operating, one task per page.
var path = []string{
	"README.md",
	"docs/getting-started.md",
	"docs/install.md",
	"docs/configuration.md",
	"docs/guides/checkpoint-restore.md",
	"docs/guides/node-lost.md",
	"docs/guides/placement.md",
	"docs/guides/statefulsets.md",
	"docs/operations.md",
	"docs/troubleshooting.md",
	"docs/security.md",
}

// Budgets, in bytes: the whole path reads in an evening, the README in minutes.
const (
	pathBudget   = 80 << 10
	readmeBudget = 10 << 10
)

// pathPages returns the path's pages, and fails for one that is missing.
func pathPages(t *testing.T) []string {
	t.Helper()
	pages := append([]string{}, path...)
	for _, p := range path {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: a page of the path is missing: %v", p, err)
		}
	}
	return pages
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPathBudget fails when the path grows past its budget.
func TestPathBudget(t *testing.T) {
	total := 0
	for _, p := range pathPages(t) {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue // reported by pathPages
		}
		total += len(b)
		t.Logf("%6d %s", len(b), p)
		if p == "README.md" && len(b) > readmeBudget {
			t.Errorf("README.md is %d bytes, over its %d", len(b), readmeBudget)
		}
	}
	t.Logf("%6d in all, budget %d", total, pathBudget)
	if total > pathBudget {
		t.Errorf("the path is %d bytes, over its budget of %d: move measurements and reasoning to the reports and docs/DESIGN.md", total, pathBudget)
	}
}

// TestPathReachedFromREADME fails for a page of the path the README does not
// link to, and for a link from the path into a report.
func TestPathReachedFromREADME(t *testing.T) {
	readme := map[string]bool{}
	for _, l := range links(read(t, "README.md")) {
		p, _, _ := strings.Cut(l.target, "#")
		readme[filepath.ToSlash(filepath.Clean(p))] = true
	}
	for _, p := range append(path[1:], "docs/guides/placement.md", "docs/guides/statefulsets.md") {
		if !readme[p] {
			t.Errorf("README.md does not link to %s", p)
		}
	}
	for _, p := range pathPages(t) {
		for _, l := range links(read(t, p)) {
			target, _, _ := strings.Cut(l.target, "#")
			if target == "" {
				continue
			}
			rel, err := filepath.Rel(root, filepath.Join(root, filepath.Dir(p), filepath.FromSlash(target)))
			if err != nil {
				continue
			}
			rel = filepath.ToSlash(rel)
			if strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "docs/historical/") {
				t.Errorf("%s:%d: links into a report (%s): the path does not lead into reports", p, l.line, rel)
			}
		}
	}
}

// lead is a page's first paragraph after its title: who the page is for and
// what the reader will have done at its end.
var lead = regexp.MustCompile(`(?s)^# [^\n]+\n\n(For [^\n].*?)(?:\n\n|$)`)

// TestPathPagesSayWhoAndWhat fails for a page of the path (the README aside)
// whose first paragraph does not say who it is for ("For …") and what the
// reader has at its end ("At the end of this page …").
func TestPathPagesSayWhoAndWhat(t *testing.T) {
	for _, p := range pathPages(t) {
		if p == "README.md" {
			continue
		}
		m := lead.FindStringSubmatch(read(t, p))
		if m == nil {
			t.Errorf("%s: the first paragraph after the title must start with \"For <who>\"", p)
			continue
		}
		if !strings.Contains(strings.Join(strings.Fields(m[1]), " "), "At the end of this page") {
			t.Errorf("%s: the first paragraph must say what the reader has \"At the end of this page\"", p)
		}
	}
}

// TestNoHistory fails for an issue number, a commit hash or a date on the
// path's pages, and for an issue number or a commit hash anywhere else in the
// documentation: history belongs to commit messages. The reports, docs/DESIGN.md
// and the other pages may carry dated measurements.
func TestNoHistory(t *testing.T) {
	onPath := map[string]bool{}
	for _, p := range pathPages(t) {
		onPath[p] = true
	}
	for _, file := range docFiles(t) {
		rel, _ := filepath.Rel(root, file)
		rel = filepath.ToSlash(rel)
		text := read(t, rel)
		why := "issue numbers and commit hashes belong to commit messages"
		if onPath[rel] {
			why = "the user's path carries no issue numbers, commit hashes or dates"
		}
		for i, line := range strings.Split(text, "\n") {
			for _, h := range harness.History(line, onPath[rel]) {
				t.Errorf("%s:%d: %q: %s", rel, i+1, strings.TrimSpace(h), why)
			}
		}
	}
}

func TestHistoryFound(t *testing.T) {
	for _, tc := range []struct {
		text  string
		dates bool
		want  int
	}{
		{"fixed in issue 57", false, 1},
		{"Issues 9 and 11: checkpointd", false, 1},
		{"a fix (#57).", false, 1},
		{"see #12 for why", false, 1},
		{"at dd593b7, after 0fdfb95", false, 2},
		{"measured 2026-11-29", true, 1},
		{"measured 2026-11-29", false, 0},
		{"[kubernetes#83562](https://github.com/kubernetes/kubernetes/issues/83562)", false, 0},
		{"a /24 of 253 addresses, 1700000000, deadbeef-free prose, `#the-anchor`", true, 0},
		{"](#error-102-or-node-notready)", false, 0},
	} {
		if got := harness.History(tc.text, tc.dates); len(got) != tc.want {
			t.Errorf("History(%q, %v) = %q, want %d finding(s)", tc.text, tc.dates, got, tc.want)
		}
	}
}
