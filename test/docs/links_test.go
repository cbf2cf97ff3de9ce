// Package docs checks the project's documentation: every relative link of
// README.md, docs/ and the test tiers' reports (test/*/README.md) names a
// file that exists and, with a #fragment, a heading of that file (as GitHub
// renders it); and the user's path (path_test.go) stays within its budget,
// free of project history. It has no build tag, so the unit tier (`make
// test`, `go test ./...`) runs it.
package docs

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's top directory, seen from this package's.
const root = "../.."

// TestLinksResolve walks the documentation (docFiles) and fails for each
// relative link whose file is missing or whose anchor matches no heading of
// the file.
func TestLinksResolve(t *testing.T) {
	files := docFiles(t)
	anchors := map[string]map[string]bool{} // markdown file → its anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range links(string(b)) {
			checked++
			if err := resolve(file, l.target, anchorsOf); err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no links found: the walk is broken")
	}
	t.Logf("%d files, %d relative links checked", len(files), checked)
}

// docFiles returns README.md, every markdown file under docs/ and the test
// tiers' reports (test/*/README.md), as paths under root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	reports, err := filepath.Glob(filepath.Join(root, "test", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, reports...)
}

// resolve checks one link target written in file.
func resolve(file, target string, anchorsOf func(string) (map[string]bool, error)) error {
	path, frag, _ := strings.Cut(target, "#")
	if path != "" {
		p, err := url.PathUnescape(path)
		if err != nil {
			return err
		}
		path = filepath.Join(filepath.Dir(file), filepath.FromSlash(p))
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("no such file or directory: %s", path)
		}
	} else {
		path = file
	}
	if frag == "" {
		return nil
	}
	if !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("anchor #%s on a file that is not markdown", frag)
	}
	a, err := anchorsOf(path)
	if err != nil {
		return err
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	if !a[strings.ToLower(frag)] {
		return fmt.Errorf("no heading with anchor #%s in %s", frag, filepath.Base(path))
	}
	return nil
}

// link is one relative link target and the line it starts on.
type link struct {
	target string
	line   int
}

var (
	fence     = regexp.MustCompile("^\\s{0,3}(```|~~~)")
	codeSpan2 = regexp.MustCompile("(?s)``.*?``")
	codeSpan  = regexp.MustCompile("`[^`]*`")
	// [text](target) or ![alt](target), with an optional "title"; the text
	// may span lines (wrapped prose).
	inlineLink = regexp.MustCompile(`\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the relative link targets of a markdown text, outside fenced
// code blocks and code spans.
func links(md string) []link {
	text := blankFences(md)
	blank := func(s string) string { // keep newlines so line numbers hold
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	}
	text = codeSpan2.ReplaceAllStringFunc(text, blank)
	text = codeSpan.ReplaceAllStringFunc(text, blank)
	var out []link
	for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
			continue // external
		}
		out = append(out, link{target: target, line: 1 + strings.Count(text[:m[0]], "\n")})
	}
	return out
}

// blankFences replaces every line inside a fenced code block (fences
// included) with an empty line.
func blankFences(md string) string {
	lines := strings.Split(md, "\n")
	open := ""
	for i, l := range lines {
		if m := fence.FindStringSubmatch(l); m != nil {
			if open == "" {
				open = m[1]
			} else if m[1] == open {
				open = ""
			}
			lines[i] = ""
			continue
		}
		if open != "" {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

var (
	atxHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// headingAnchors returns the anchors GitHub gives the headings of a markdown
// text (and explicit <a name|id="…"> anchors).
func headingAnchors(md string) map[string]bool {
	a := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(blankFences(md), "\n") {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			a[strings.ToLower(m[1])] = true
		}
		m := atxHeading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n, dup := seen[s]; dup {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		a[s] = true
	}
	return a
}

// slug is GitHub's anchor for a heading's text: the rendered text lower-cased,
// every character but letters, digits, marks, '_', '-' and spaces removed,
// spaces turned into '-'.
func slug(heading string) string {
	text := mdLinkText.ReplaceAllString(heading, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Installing stickyip on a cluster", "installing-stickyip-on-a-cluster"},
		{"checkpointd as a static pod — why", "checkpointd-as-a-static-pod--why"},
		{"Metrics (`/metrics`) and health", "metrics-metrics-and-health"},
		{"The placement policy at scale (`make bench-placement`)", "the-placement-policy-at-scale-make-bench-placement"},
		{"Placement: a re-created pod comes back", "placement-a-re-created-pod-comes-back"},
		{"Switching from host-local (workload 6)", "switching-from-host-local-workload-6"},
		{"Reusing the harness (`test/harness`)", "reusing-the-harness-testharness"},
		{"**Bold** and [a link](x.md) and snake_case", "bold-and-a-link-and-snake_case"},
		{"Ünïcode 1.36", "ünïcode-136"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestHeadingAnchors(t *testing.T) {
	md := "# Title\n## Tests\n```sh\n# not a heading\n```\n### Tests\n## Tests ##\n<a name=\"Custom\"></a>\n"
	got := headingAnchors(md)
	for _, want := range []string{"title", "tests", "tests-1", "tests-2", "custom"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code block was taken for a heading")
	}
}

func TestLinksFound(t *testing.T) {
	md := "See [the doc](docs/a.md#b), [a wrapped\nlink](#local), ![img](x.png \"t\").\n" +
		"`[code](skip.md)` and [web](https://example.org) and [mail](mailto:a@b).\n" +
		"```\n[fenced](skip.md)\n```\n[last](<c.md>)\n"
	var got []string
	for _, l := range links(md) {
		got = append(got, fmt.Sprintf("%d:%s", l.line, l.target))
	}
	want := []string{"1:docs/a.md#b", "1:#local", "2:x.png", "7:c.md"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links = %v, want %v", got, want)
	}
}

func TestResolveCatches(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.md")
	if err := os.WriteFile(a, []byte("# A\n## Known part\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	anchorsOf := func(p string) (map[string]bool, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		return headingAnchors(string(b)), nil
	}
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"a.md", true},
		{"a.md#known-part", true},
		{"#known-part", true},
		{"missing.md", false},
		{"a.md#unknown-part", false},
		{"#a-1", false},
	} {
		err := resolve(a, tc.target, anchorsOf)
		if (err == nil) != tc.ok {
			t.Errorf("resolve(%q) = %v, want ok=%v", tc.target, err, tc.ok)
		}
	}
}
