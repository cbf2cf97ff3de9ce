package build

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stickyip/stickyip/test/harness"
)

// skipDir are directories no check here reads: build output, VCS, test
// data, and the previous release's manifests kept for the upgrade from it.
func skipDir(rel string) bool {
	base := filepath.Base(rel)
	return base == "_output" || base == ".git" || base == "testdata" || base == "node_modules" ||
		rel == "deploy/placement/former" || rel == "deploy/helm/stickyip/files/placement/former"
}

// TestNoHistoryInComments fails for an issue number, a commit hash or a date
// in a comment of the code — Go, the Makefiles, the scripts, the manifests:
// a comment says why the code is as it is, and history belongs to commit
// messages (the reports under test/ may carry dated measurements, in
// Markdown, which test/docs checks).
func TestNoHistoryInComments(t *testing.T) {
	root := repoRoot(t)
	var found int
	eachComment(t, root, func(rel string, c comment) {
		for _, h := range harness.History(c.text, true) {
			found++
			t.Errorf("%s:%d: %q in a comment: history belongs to commit messages", rel, c.line, strings.TrimSpace(h))
		}
	})
	if found == 0 && len(comments(t, filepath.Join(root, "Makefile"), "Makefile")) == 0 {
		t.Fatal("read no comment of the Makefile: the walk proves nothing")
	}
}

// mdRef is a Markdown page of the repository named in a comment.
var mdRef = regexp.MustCompile(`\b(?:docs|test|deploy)/[A-Za-z0-9_./-]+\.md\b`)

// TestCommentsNameExistingPages fails for a comment that sends its reader
// to a page of the repository that is not there (moved or deleted).
func TestCommentsNameExistingPages(t *testing.T) {
	root := repoRoot(t)
	seen := 0
	eachComment(t, root, func(rel string, c comment) {
		for _, page := range mdRef.FindAllString(c.text, -1) {
			seen++
			if _, err := os.Stat(filepath.Join(root, page)); err != nil {
				t.Errorf("%s:%d: names %s, which is not there", rel, c.line, page)
			}
		}
	})
	if seen == 0 {
		t.Fatal("no comment names a page: the walk proves nothing")
	}
}

// eachComment calls fn for every comment of the files under root that the
// checks read (skipDir leaves the rest out), with the file's path from root.
func eachComment(t *testing.T, root string, fn func(rel string, c comment)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && skipDir(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		for _, c := range comments(t, p, rel) {
			fn(rel, c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type comment struct {
	line int
	text string
}

// comments returns the comments of file p (rel from the repository's root)
// when it is code: Go comments, and the '#' lines of Makefiles, shell
// scripts and YAML.
func comments(t *testing.T, p, rel string) []comment {
	t.Helper()
	base := filepath.Base(rel)
	switch {
	case strings.HasSuffix(base, ".go"):
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil // not Go this toolchain parses (a build-tagged fixture): go vet's business
		}
		var out []comment
		for _, g := range f.Comments {
			for _, c := range g.List {
				out = append(out, comment{fset.Position(c.Pos()).Line, c.Text})
			}
		}
		return out
	case base == "Makefile" || strings.HasSuffix(base, ".mk") || strings.HasSuffix(base, ".sh") ||
		strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml") || base == "Kustomization" ||
		base == "run" && strings.HasPrefix(rel, ".ci/") || base == "Dockerfile":
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var out []comment
		s := bufio.NewScanner(f)
		s.Buffer(nil, 1<<20)
		for n := 1; s.Scan(); n++ {
			line := strings.TrimSpace(s.Text())
			if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ') {
				out = append(out, comment{n, line[i:]})
			}
		}
		return out
	}
	return nil
}

func TestHistoryInCommentsFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gofile := write("x.go", "package x\n\n// fixed in issue 12 at dd593b7\nvar s = \"issue 9\" // a string is not a comment\n")
	mk := write("x.mk", "# measured 2026-11-29\nall: ; echo '#12'\n")
	var got []string
	for _, c := range append(comments(t, gofile, "x.go"), comments(t, mk, "x.mk")...) {
		got = append(got, harness.History(c.text, true)...)
	}
	if want := 3; len(got) != want {
		t.Errorf("found %q, want %d findings (an issue number and a hash in the Go comment, a date in the Makefile's)", got, want)
	}
}

// The shape of checkpointd (docs/DESIGN.md, "Layout"): rooms a maintainer
// can hold. No non-test file over maxFileLines, no function over
// maxFuncLines, and no package under minRoomLines that one package alone
// imports (fold it into its user).
const (
	maxFileLines = 400
	maxFuncLines = 80
	minRoomLines = 150
)

func TestCheckpointdRooms(t *testing.T) {
	root := repoRoot(t)
	const prefix = "github.com/stickyip/stickyip/"
	lines := map[string]int{}          // package dir → non-test lines
	importers := map[string][]string{} // package dir → dirs of the checkpointd packages that import it
	err := filepath.WalkDir(filepath.Join(root, "checkpointd"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n := strings.Count(string(src), "\n")
		lines[filepath.ToSlash(filepath.Dir(rel))] += n
		if n > maxFileLines {
			t.Errorf("%s: %d lines, over %d: split it by what its parts do", rel, n, maxFileLines)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			path := strings.Trim(im.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(path, prefix); ok && strings.HasPrefix(dep, "checkpointd/") {
				me := filepath.ToSlash(filepath.Dir(rel))
				if !slices.Contains(importers[dep], me) {
					importers[dep] = append(importers[dep], me)
				}
			}
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, over %d", rel, fset.Position(fn.Pos()).Line, funcName(fn), n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 5 {
		t.Fatalf("read %d packages of checkpointd: the walk proves nothing", len(lines))
	}
	for dir, n := range lines {
		if imp := importers[dir]; len(imp) == 1 && n < minRoomLines {
			t.Errorf("%s: %d lines, imported by %s alone: fold it into its user", dir, n, imp[0])
		}
	}
	t.Logf("checkpointd: %d packages", len(lines))
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return fmt.Sprintf("(%s).%s", types(fn.Recv.List[0].Type), fn.Name.Name)
}

func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return "*" + types(x.X)
	case *ast.Ident:
		return x.Name
	case *ast.IndexExpr:
		return types(x.X)
	case *ast.IndexListExpr:
		return types(x.X)
	}
	return "?"
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
